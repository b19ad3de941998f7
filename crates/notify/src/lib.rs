//! Score notifications (`notifications:` of a score, execution.md §9.11): `desktop`
//! (freedesktop notification over the session D-Bus), `slack` (incoming webhook) and
//! `webhook` (upstream's JSON payload and headers).
//!
//! [`notify`] never blocks its caller and never fails a job: each delivery runs in its own
//! tokio task with a timeout and bounded retries, and a failure is a logged warning. URLs
//! are redacted ([`redact_url`]) wherever they are logged, since webhook URLs carry secrets.

mod deliver;
mod message;

use std::time::Duration;

use mozart_config::model::{NotificationConfig, NotificationEvent, NotificationType};

pub use deliver::{slack_payload, webhook_payload};
pub use message::{format_duration, title, Context};

/// The spelling of an event on the wire (`job_complete`, …).
pub fn event_name(event: NotificationEvent) -> &'static str {
    match event {
        NotificationEvent::JobStart => "job_start",
        NotificationEvent::SheetStart => "sheet_start",
        NotificationEvent::SheetComplete => "sheet_complete",
        NotificationEvent::SheetFailed => "sheet_failed",
        NotificationEvent::JobComplete => "job_complete",
        NotificationEvent::JobFailed => "job_failed",
        NotificationEvent::JobPaused => "job_paused",
    }
}

/// Send `ctx` to every channel of `configs` subscribed to its event, each in a task of
/// its own; returns how many deliveries were started. Must be called inside a tokio
/// runtime (otherwise nothing is sent and a warning is logged).
pub fn notify(configs: &[NotificationConfig], ctx: &Context) -> usize {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            event = event_name(ctx.event),
            "notification skipped: no async runtime"
        );
        return 0;
    };
    let mut started = 0;
    for config in configs.iter().filter(|c| c.on_events.contains(&ctx.event)) {
        let config = config.clone();
        let ctx = ctx.clone();
        handle.spawn(async move { deliver::deliver(&config, &ctx).await });
        started += 1;
    }
    started
}

/// Await the delivery of `ctx` to one channel (what [`notify`] spawns); `true` when it
/// arrived. For tests and tools; the job engine uses [`notify`].
pub async fn deliver_one(config: &NotificationConfig, ctx: &Context) -> bool {
    deliver::deliver(config, ctx).await
}

/// `scheme://host[:port]/***` for a URL with a path or query (the secret parts of Slack
/// and most webhook URLs), the URL itself otherwise.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".into();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    // Credentials in the authority (`user:token@host`) are secrets too.
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let tail = &rest[end..];
    if tail.is_empty() || tail == "/" {
        format!("{scheme}://{host}{tail}")
    } else {
        format!("{scheme}://{host}/***")
    }
}

/// Channel settings read from `notifications[].config`, with upstream's defaults.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub timeout: Duration,
    pub max_retries: u32,
    pub retry_delay: Duration,
}

impl Settings {
    pub(crate) fn of(config: &NotificationConfig) -> Settings {
        let num = |k: &str| config.config.get(k).and_then(serde_json::Value::as_f64);
        let secs = |v: f64, dflt: f64| {
            Duration::from_secs_f64(if v.is_finite() && v >= 0.0 { v } else { dflt })
        };
        let default_timeout = match config.kind {
            NotificationType::Webhook => 30.0,
            _ => 10.0,
        };
        Settings {
            timeout: secs(num("timeout").unwrap_or(default_timeout), default_timeout),
            max_retries: num("max_retries").map_or(2, |n| n.clamp(0.0, 10.0) as u32),
            retry_delay: secs(num("retry_delay").unwrap_or(1.0), 1.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_only_scheme_and_host() {
        assert_eq!(
            redact_url("https://hooks.slack.com/services/T0/B0/secret"),
            "https://hooks.slack.com/***"
        );
        assert_eq!(
            redact_url("http://127.0.0.1:8080/hook?token=abc"),
            "http://127.0.0.1:8080/***"
        );
        assert_eq!(
            redact_url("https://user:pw@example.com/"),
            "https://example.com/"
        );
        assert_eq!(redact_url("not a url"), "***");
    }
}
