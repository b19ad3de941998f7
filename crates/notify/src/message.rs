//! What a notification says: the event's context, title and one-line message
//! (upstream's `NotificationContext`).

use mozart_config::model::NotificationEvent;
use serde_json::{json, Value};

/// The facts of one event.
#[derive(Debug, Clone)]
pub struct Context {
    /// Which event.
    pub event: NotificationEvent,
    /// Job (score) ID.
    pub job_id: String,
    /// The score's `name`.
    pub job_name: String,
    /// When it happened (epoch seconds).
    pub timestamp: f64,
    /// The sheet, for sheet events.
    pub sheet_num: Option<u32>,
    /// Sheets in the job.
    pub total_sheets: Option<u32>,
    /// Completed sheets (job end).
    pub success_count: Option<u32>,
    /// Failed sheets (job end).
    pub failure_count: Option<u32>,
    /// Why it failed.
    pub error_message: Option<String>,
    /// Job duration so far (seconds).
    pub duration_seconds: Option<f64>,
}

impl Context {
    /// A context with only the event and the job.
    pub fn new(event: NotificationEvent, job_id: &str, job_name: &str) -> Context {
        Context {
            event,
            job_id: job_id.to_string(),
            job_name: job_name.to_string(),
            timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            sheet_num: None,
            total_sheets: None,
            success_count: None,
            failure_count: None,
            error_message: None,
            duration_seconds: None,
        }
    }

    /// ISO 8601 time of the event.
    pub fn timestamp_iso(&self) -> String {
        jiff::Timestamp::from_microsecond((self.timestamp * 1e6) as i64)
            .map(|t| t.to_string())
            .unwrap_or_default()
    }

    /// Upstream's serialized context (`asdict`, enum as its value, time as ISO).
    pub fn to_json(&self) -> Value {
        json!({
            "event": crate::event_name(self.event),
            "job_id": self.job_id,
            "job_name": self.job_name,
            "timestamp": self.timestamp_iso(),
            "sheet_num": self.sheet_num,
            "total_sheets": self.total_sheets,
            "success_count": self.success_count,
            "failure_count": self.failure_count,
            "error_message": self.error_message,
            "duration_seconds": self.duration_seconds,
            "extra": {},
        })
    }

    /// What `error_message` is to a reader: a pause's reason is no error.
    pub fn reason_label(&self) -> &'static str {
        if self.event == NotificationEvent::JobPaused {
            "Reason"
        } else {
            "Error"
        }
    }

    /// Parts of the message, joined by ` | ` (progress, results, duration, error).
    pub fn message(&self) -> String {
        let mut parts = Vec::new();
        if let (Some(n), Some(t)) = (self.sheet_num, self.total_sheets) {
            parts.push(format!("Sheet {n}/{t}"));
        }
        if let (Some(s), Some(f)) = (self.success_count, self.failure_count) {
            parts.push(format!("{s} passed, {f} failed"));
        }
        if let Some(d) = self.duration_seconds {
            parts.push(format_duration(d));
        }
        if let Some(e) = &self.error_message {
            let short: String = e.chars().take(100).collect();
            let dots = if e.chars().count() > 100 { "..." } else { "" };
            parts.push(format!("{}: {short}{dots}", self.reason_label()));
        }
        if parts.is_empty() {
            crate::event_name(self.event).to_string()
        } else {
            parts.join(" | ")
        }
    }
}

/// `12.3s`, `4.5min`, `1.2h` (upstream's formatting).
pub fn format_duration(secs: f64) -> String {
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else if secs < 3600.0 {
        format!("{:.1}min", secs / 60.0)
    } else {
        format!("{:.1}h", secs / 3600.0)
    }
}

/// The notification title of an event.
pub fn title(ctx: &Context) -> String {
    let name = &ctx.job_name;
    let sheet = ctx.sheet_num.unwrap_or(0);
    match ctx.event {
        NotificationEvent::JobStart => format!("Mozart: Job '{name}' Started"),
        NotificationEvent::JobComplete => format!("Mozart: Job '{name}' Complete ✓"),
        NotificationEvent::JobFailed => format!("Mozart: Job '{name}' Failed ✗"),
        NotificationEvent::JobPaused => format!("Mozart: Job '{name}' Paused"),
        NotificationEvent::SheetStart => format!("Mozart: Sheet {sheet} Started"),
        NotificationEvent::SheetComplete => format!("Mozart: Sheet {sheet} Complete"),
        NotificationEvent::SheetFailed => format!("Mozart: Sheet {sheet} Failed"),
    }
}
