//! Output helpers shared by commands (cli.md §1.6).

/// How a command prints its result and its errors: for people, or one JSON document
/// (`--json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputMode {
    /// Text for a terminal.
    #[default]
    Human,
    /// JSON for scripts.
    Json,
}

impl OutputMode {
    /// The mode a command's `--json` flag asks for.
    pub fn of(json: bool) -> OutputMode {
        if json {
            OutputMode::Json
        } else {
            OutputMode::Human
        }
    }

    /// True for JSON output.
    pub fn is_json(self) -> bool {
        self == OutputMode::Json
    }

    /// The JSON document `make` builds, in JSON mode only.
    pub fn json<T>(self, make: impl FnOnce() -> T) -> Option<T> {
        self.is_json().then(make)
    }

    /// The parser of a `--json` flag (`ArgAction::SetTrue`): the flag is the mode.
    pub fn flag() -> clap::builder::ValueParser {
        use clap::builder::TypedValueParser;
        clap::builder::ValueParser::new(clap::builder::BoolValueParser::new().map(OutputMode::of))
    }
}

/// Print `Error: <message>` and, if any, a `Hints:` list, to stdout as upstream does.
pub fn print_error(message: &str, hints: &[String]) {
    print_headline(&format!("Error: {message}"), hints);
}

/// Print an error's whole first line (`Error: …`, `Error [E502]: …`) and, if any, a
/// `Hints:` list, to stdout.
/// Every suggested command names the conductor this one selected ([`crate::selector`]).
pub fn print_headline(headline: &str, hints: &[String]) {
    println!("{}", crate::selector::commands(headline));
    if !hints.is_empty() {
        println!();
        println!("Hints:");
        for hint in hints {
            println!("  - {}", crate::selector::commands(hint));
        }
    }
}

/// Print a JSON document pretty-printed with 2-space indentation.
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T) {
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
    // A line holding line breaks (a command's output in a message) is several lines: each
    // stays inside the border.
    for line in lines.iter().flat_map(|l| l.split('\n')) {
        // A score's name, description or prompt is shown, not obeyed (and no escape may
        // throw the border's width off): every control character written out.
        let line = plain(line.trim_end_matches('\r'));
        let line = line.as_ref();
        let chars: Vec<char> = line.chars().collect();
        if chars.len() <= inner {
            wrapped.push(line.to_string());
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

/// A `serde_json` formatter that prints like Python's `json.dumps(value, indent=2)`, the
/// format of upstream's `--json` output: two-space indentation and `ensure_ascii` (every
/// character outside printable ASCII as `\uXXXX`, UTF-16 surrogate pairs beyond the BMP).
pub struct PyJsonFormatter {
    inner: serde_json::ser::PrettyFormatter<'static>,
}

impl PyJsonFormatter {
    /// A formatter for a value that sits `depth` levels deep in an enclosing document, so
    /// its nested lines carry the enclosing indentation (the value itself starts where the
    /// caller left the cursor).
    pub fn at_depth(depth: usize) -> Self {
        use serde_json::ser::Formatter;
        let mut inner = serde_json::ser::PrettyFormatter::new();
        for _ in 0..depth {
            // Only moves the formatter's indentation level; nothing is written.
            let _ = inner.begin_array(&mut std::io::sink());
        }
        PyJsonFormatter { inner }
    }
}

macro_rules! delegate_to_pretty {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $name<W: ?Sized + std::io::Write>(&mut self, w: &mut W $(, $arg: $ty)*) -> std::io::Result<()> {
                self.inner.$name(w $(, $arg)*)
            }
        )*
    };
}

impl serde_json::ser::Formatter for PyJsonFormatter {
    delegate_to_pretty! {
        begin_array();
        end_array();
        begin_array_value(first: bool);
        end_array_value();
        begin_object();
        end_object();
        begin_object_key(first: bool);
        end_object_key();
        begin_object_value();
        end_object_value();
    }

    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        // serde_json has already escaped quotes, backslashes and C0 controls; what is left
        // for `ensure_ascii` is DEL and everything beyond ASCII.
        let bytes = fragment.as_bytes();
        if !bytes.iter().any(|b| *b >= 0x7f) {
            return w.write_all(bytes);
        }
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if c.is_ascii() && c != '\u{7f}' {
                continue;
            }
            w.write_all(&bytes[start..i])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(w, "\\u{unit:04x}")?;
            }
            start = i + c.len_utf8();
        }
        w.write_all(&bytes[start..])
    }
}

/// Serialize `value` as it appears `depth` levels deep in a Python-style JSON document.
pub fn write_py_json<W: std::io::Write, T: serde::Serialize + ?Sized>(
    out: &mut W,
    depth: usize,
    value: &T,
) -> std::io::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(out, PyJsonFormatter::at_depth(depth));
    value.serialize(&mut ser).map_err(std::io::Error::other)
}

/// Writes one JSON object or array member by member, laid out as Python's
/// `json.dumps(indent=2)` would lay it out `depth` levels deep; values go through
/// [`write_py_json`]. Lets a large document be streamed without building it first.
pub struct PyJsonNode {
    depth: usize,
    close: u8,
    empty: bool,
}

impl PyJsonNode {
    /// Open an object (`{`) at `depth`.
    pub fn object<W: std::io::Write>(out: &mut W, depth: usize) -> std::io::Result<Self> {
        out.write_all(b"{")?;
        Ok(PyJsonNode {
            depth,
            close: b'}',
            empty: true,
        })
    }

    /// Open an array (`[`) at `depth`.
    pub fn array<W: std::io::Write>(out: &mut W, depth: usize) -> std::io::Result<Self> {
        out.write_all(b"[")?;
        Ok(PyJsonNode {
            depth,
            close: b']',
            empty: true,
        })
    }

    /// Start the next member: separator, newline and indentation (the caller writes it).
    pub fn next<W: std::io::Write>(&mut self, out: &mut W) -> std::io::Result<()> {
        out.write_all(if self.empty { b"\n" } else { b",\n" })?;
        self.empty = false;
        indent_to(out, self.depth + 1)
    }

    /// Start an object member `"key": ` (keys are plain ASCII names).
    pub fn key<W: std::io::Write>(&mut self, out: &mut W, key: &str) -> std::io::Result<()> {
        self.next(out)?;
        write!(out, "\"{key}\": ")
    }

    /// Write an object member `"key": value`.
    pub fn field<W: std::io::Write, T: serde::Serialize + ?Sized>(
        &mut self,
        out: &mut W,
        key: &str,
        value: &T,
    ) -> std::io::Result<()> {
        self.key(out, key)?;
        write_py_json(out, self.depth + 1, value)
    }

    /// Close the object or array.
    pub fn end<W: std::io::Write>(self, out: &mut W) -> std::io::Result<()> {
        if !self.empty {
            out.write_all(b"\n")?;
            indent_to(out, self.depth)?;
        }
        out.write_all(&[self.close])
    }
}

fn indent_to<W: std::io::Write>(out: &mut W, depth: usize) -> std::io::Result<()> {
    const SPACES: [u8; 64] = [b' '; 64];
    let mut n = depth * 2;
    while n > 0 {
        let k = n.min(SPACES.len());
        out.write_all(&SPACES[..k])?;
        n -= k;
    }
    Ok(())
}

/// What an instrument printed (or a score, a hook, a hostile local user's file, or a file
/// they had a workspace hold) is shown, not obeyed. Every control character but newline and
/// tab — escape sequences that set the window title, write the clipboard (OSC 52), clear
/// the screen or move the cursor; a carriage return that would overwrite a line with a fake
/// Mozart message; C1 controls — is written out as `\xNN` (`\u{NNNN}` for C1). Colour
/// (SGR, `ESC [ … m`) is kept — Mozart's own, and harmless in anyone's — when it sets only
/// colours and bold, dim, italic, underline or reverse (and their resets); any other
/// attribute (conceal, which hides all text after it; blink) is written out too. A text
/// that kept a colour ends with a reset, so that none carries on into what follows.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    let mut coloured = false;
    while let Some(c) = rest.chars().next() {
        if c == '\u{1b}' {
            // ESC [ params m: a colour, kept whole.
            let tail = &rest[1..];
            if let Some(after) = tail.strip_prefix('[') {
                let params = after
                    .find(|ch: char| !(ch.is_ascii_digit() || ch == ';'))
                    .unwrap_or(after.len());
                if after[params..].starts_with('m') && harmless_sgr(&after[..params]) {
                    let len = 2 + params + 1;
                    out.push_str(&rest[..len]);
                    rest = &rest[len..];
                    // Open until a reset (`ESC[m`, `ESC[0m`) closes it.
                    coloured = !matches!(&after[..params], "" | "0");
                    continue;
                }
            }
        }
        if unsafe_char(c) {
            write_out(&mut out, c);
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    if coloured {
        // Before the text's own last line break, if any: the line stays the last one.
        let body = out.trim_end_matches('\n').len();
        out.insert_str(body, "\u{1b}[0m");
    }
    std::borrow::Cow::Owned(out)
}

/// `text` with every control character but tab written out as `\xNN` (`\u{NNNN}` for C1),
/// colours included: for text inside a drawn panel.
pub fn plain(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\t') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c.is_control() && c != '\t' {
            write_out(&mut out, c);
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The control character `c` written out: `\xNN`, or `\u{NNNN}` beyond ASCII (C1).
fn write_out(out: &mut String, c: char) {
    use std::fmt::Write;
    let _ = if (c as u32) < 0x80 {
        write!(out, "\\x{:02x}", c as u32)
    } else {
        write!(out, "\\u{{{:04x}}}", c as u32)
    };
}

/// Whether an SGR's parameters (`31`, `1;32`, `38;5;208`, empty = reset) set only colours
/// and the plain attributes: 0–4, 7, their resets 22–24 and 27, 30–39, 40–49, 90–97,
/// 100–107, with 38/48's `5;n` and `2;r;g;b` forms.
fn harmless_sgr(params: &str) -> bool {
    let mut values = params.split(';').map(|p| {
        if p.is_empty() {
            Some(0)
        } else {
            p.parse::<u16>().ok()
        }
    });
    while let Some(v) = values.next() {
        match v {
            Some(0..=4 | 7 | 22..=24 | 27 | 30..=37 | 39..=47 | 49 | 90..=97 | 100..=107) => {}
            Some(38 | 48) => {
                let n = match values.next() {
                    Some(Some(5)) => 1,
                    Some(Some(2)) => 3,
                    _ => return false,
                };
                for _ in 0..n {
                    if !matches!(values.next(), Some(Some(0..=255))) {
                        return false;
                    }
                }
            }
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod terminal_safe_tests {
    use super::terminal_safe;

    #[test]
    fn escapes_are_shown_not_obeyed_and_colours_stay() {
        let hostile = "a\u{1b}]0;PWNED\u{7}b\u{1b}[2Jc\rfake\u{1b}]52;c;cm0=\u{7}\u{9b}d";
        assert_eq!(
            terminal_safe(hostile),
            "a\\x1b]0;PWNED\\x07b\\x1b[2Jc\\x0dfake\\x1b]52;c;cm0=\\x07\\u{009b}d"
        );
        let ours = "\u{1b}[1;31mfailed\u{1b}[0m\tsheet 1\n";
        assert_eq!(terminal_safe(ours), ours);
        // Conceal (8) would hide everything after it, a blink (5) is no colour: shown.
        assert_eq!(
            terminal_safe("Error: \u{1b}[8mhidden \u{1b}[5mblink"),
            "Error: \\x1b[8mhidden \\x1b[5mblink"
        );
        // A colour left open is closed at the end, before the last line break.
        assert_eq!(
            terminal_safe("x \u{1b}[38;5;208morange\n"),
            "x \u{1b}[38;5;208morange\u{1b}[0m\n"
        );
        assert_eq!(terminal_safe("\u{1b}[38;5;999m"), "\\x1b[38;5;999m");
        assert!(matches!(
            terminal_safe("plain\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
