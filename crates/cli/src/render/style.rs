//! Terminal colours: on only when stdout is a TTY and `NO_COLOR` is unset (cli.md §1.1:
//! colour codes only on a TTY).

use std::io::IsTerminal;

/// A colour or emphasis applied to one piece of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Color {
    /// Errors, failures.
    Red,
    /// Running, passes.
    Green,
    /// Completed jobs.
    BrightGreen,
    /// Warnings, paused, queued.
    Yellow,
    /// In-progress sheets.
    Blue,
    /// Identifiers.
    Cyan,
    /// De-emphasised hints.
    Dim,
    /// Headings.
    Bold,
}

impl Color {
    fn sgr(self) -> &'static str {
        match self {
            Color::Red => "31",
            Color::Green => "32",
            Color::BrightGreen => "92",
            Color::Yellow => "33",
            Color::Blue => "34",
            Color::Cyan => "36",
            Color::Dim => "2",
            Color::Bold => "1",
        }
    }
}

/// Whether to emit ANSI colour codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Style {
    color: bool,
}

impl Style {
    /// No colour at all (tests, pipes, `--json`).
    pub fn plain() -> Self {
        Style { color: false }
    }

    /// Colour when stdout is a terminal and `NO_COLOR` is not set (https://no-color.org).
    pub fn for_stdout() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            color: !no_color && std::io::stdout().is_terminal(),
        }
    }

    /// Wrap `text` in the colour's escape codes when colour is on.
    pub fn paint(&self, text: &str, color: Color) -> String {
        if self.color && !text.is_empty() {
            format!("\x1b[{}m{text}\x1b[0m", color.sgr())
        } else {
            text.to_string()
        }
    }
}

/// Colour of a job status word (upstream's overview and list palette).
pub fn job_status_color(status: &str) -> Color {
    match status {
        "running" => Color::Green,
        "completed" => Color::BrightGreen,
        "failed" => Color::Red,
        "queued" | "paused" | "pausing" | "pending" => Color::Yellow,
        _ => Color::Dim,
    }
}

/// Colour of a sheet display status.
pub fn sheet_status_color(status: &str) -> Color {
    match status {
        "completed" => Color::Green,
        "failed" => Color::Red,
        "in_progress" | "running" => Color::Blue,
        _ => Color::Dim,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn plain_style_never_emits_escape_codes() {
        assert_eq!(Style::plain().paint("RUNNING", Color::Green), "RUNNING");
        let on = Style { color: true };
        assert_eq!(on.paint("x", Color::Red), "\x1b[31mx\x1b[0m");
        assert_eq!(on.paint("", Color::Red), "");
    }
}
