//! Output helpers shared by commands (cli.md §1.6).

/// Print `Error: <message>` and, if any, a `Hints:` list, to stdout as upstream does.
pub fn print_error(message: &str, hints: &[String]) {
    println!("Error: {message}");
    if !hints.is_empty() {
        println!();
        println!("Hints:");
        for hint in hints {
            println!("  - {hint}");
        }
    }
}

/// Print a JSON value pretty-printed with 2-space indentation.
pub fn print_json(value: &serde_json::Value) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(err) => {
            println!("{{\"success\": false, \"message\": \"cannot encode output: {err}\"}}")
        }
    }
}

/// Escape non-ASCII characters as `\uXXXX` (Python `json.dumps` default `ensure_ascii`), so
/// `--json` output matches upstream byte for byte. Only valid inside serialized JSON, where
/// non-ASCII text can appear only within strings.
pub fn ascii_json(text: &str) -> String {
    if text.is_ascii() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut buf = [0u16; 2];
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            for unit in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Terminal width for panels: `$COLUMNS`, else 80 (Rich's default when not a TTY).
pub fn console_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|w| *w >= 20)
        .unwrap_or(80)
}

/// Draw a rounded panel around `lines`, word-wrapped to `width`; `expand` fills the width.
pub fn boxed(lines: &[String], width: usize, expand: bool) -> String {
    let inner = width.saturating_sub(4).max(1);
    let mut wrapped: Vec<String> = Vec::new();
    for line in lines {
        let chars: Vec<char> = line.chars().collect();
        if chars.len() <= inner {
            wrapped.push(line.clone());
            continue;
        }
        let mut current = String::new();
        for word in line.split(' ') {
            let cur_len = current.chars().count();
            let word_len = word.chars().count();
            if cur_len > 0 && cur_len + 1 + word_len > inner {
                wrapped.push(std::mem::take(&mut current));
            }
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(word);
            while current.chars().count() > inner {
                let head: String = current.chars().take(inner).collect();
                current = current.chars().skip(inner).collect();
                wrapped.push(head);
            }
        }
        wrapped.push(current);
    }
    let content = if expand {
        inner
    } else {
        wrapped
            .iter()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0)
            .min(inner)
    };
    let mut out = format!("╭{}╮\n", "─".repeat(content + 2));
    for l in &wrapped {
        let pad = content.saturating_sub(l.chars().count());
        out.push_str(&format!("│ {l}{} │\n", " ".repeat(pad)));
    }
    out.push_str(&format!("╰{}╯\n", "─".repeat(content + 2)));
    out
}
