//! The global flags that select which conductor a command talks to (`--conductor-clone=NAME`),
//! written into every command the CLI suggests: a hint that drops them names production's
//! conductor (`mozart stop --yes` after `mozart --conductor-clone=try stop` stops production).

use std::borrow::Cow;
use std::sync::OnceLock;

/// The selecting flags of this process (`--conductor-clone=NAME`), set once by `main`.
static FLAGS: OnceLock<String> = OnceLock::new();
/// The clone this process selected (`Some("")`: the default clone).
static CLONE: OnceLock<Option<String>> = OnceLock::new();

/// The subcommands whose suggestion must carry the selecting flags: those that talk to a
/// conductor or read its files (registry, log, socket).
const CONDUCTOR_COMMANDS: &[&str] = &[
    "run",
    "status",
    "list",
    "pause",
    "resume",
    "cancel",
    "modify",
    "clear",
    "top",
    "logs",
    "errors",
    "diagnose",
    "history",
    "start",
    "stop",
    "restart",
    "conductor-status",
    "instruments",
    "dashboard",
    "mcp",
    "doctor",
    "recover",
    "config",
    "clear-rate-limits",
    "wait",
];

/// Remember the selecting flags of this command line (`clone`: `--conductor-clone`'s value,
/// `Some("")` for the default clone).
pub fn set(clone: Option<&str>) {
    let _ = CLONE.set(clone.map(str::to_string));
    if let Some(name) = clone {
        let _ = FLAGS.set(format!("--conductor-clone={name}"));
    }
}

/// The clone this process selected (`Some("")`: the default clone; `None`: production).
pub fn clone() -> Option<&'static str> {
    CLONE.get().and_then(|c| c.as_deref())
}

/// The selecting flags (empty for production).
pub fn flags() -> &'static str {
    FLAGS.get().map_or("", String::as_str)
}

/// `text` with the selecting flags after `mozart` in every suggested command of a conductor
/// (`mozart status j` → `mozart --conductor-clone=try status j`); as it is for production.
pub fn commands(text: &str) -> Cow<'_, str> {
    with_flags(text, flags())
}

/// Print one line holding suggested commands ([`commands`]).
pub fn say(line: impl AsRef<str>) {
    println!("{}", commands(line.as_ref()));
}

/// [`commands`] with the flags given.
fn with_flags<'a>(text: &'a str, flags: &str) -> Cow<'a, str> {
    const WORD: &str = "mozart ";
    if flags.is_empty() || !text.contains(WORD) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + flags.len() * 2);
    let mut rest = text;
    let mut before: Option<char> = None;
    while let Some(at) = rest.find(WORD) {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let prev = head.chars().next_back().or(before);
        let after = &tail[WORD.len()..];
        let sub: &str = after
            .split(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .next()
            .unwrap_or("");
        let starts_command = prev.is_none_or(|c| c.is_whitespace() || "'\"`(:".contains(c));
        out.push_str(WORD);
        if starts_command && CONDUCTOR_COMMANDS.contains(&sub) {
            out.push_str(flags);
            out.push(' ');
        }
        before = Some(' ');
        rest = after;
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::with_flags;

    #[test]
    fn suggested_commands_of_a_conductor_carry_the_flags() {
        let f = "--conductor-clone=try";
        assert_eq!(
            with_flags("Go ahead anyway: mozart stop --yes", f),
            "Go ahead anyway: mozart --conductor-clone=try stop --yes"
        );
        assert_eq!(
            with_flags("'mozart resume j' then `mozart status j`", f),
            "'mozart --conductor-clone=try resume j' then `mozart --conductor-clone=try status j`"
        );
        // Not a conductor's command, not a command at all: as it is.
        assert_eq!(
            with_flags("mozart validate s.yaml; ~/.mozart logs", f),
            "mozart validate s.yaml; ~/.mozart logs"
        );
        assert_eq!(with_flags("mozart stop", ""), "mozart stop");
    }
}
