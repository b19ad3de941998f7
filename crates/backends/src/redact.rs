//! Credential redaction for everything Mozart stores or shows: captured output, error
//! messages, cross-sheet files, the instruments' output logs, the conductor's log
//! (execution.md §9.13, widened by issue 21 "secrets stay secret").
//!
//! Four kinds of secret are replaced, in this order:
//! 1. **Known values.** The exact value of every environment variable whose name looks
//!    secret ([`is_secret_name`]): the process's own environment (for the conductor, the
//!    environment it was started with, read on first use) and whatever an instrument's
//!    environment adds ([`register_env`], [`register_value`]) → `[REDACTED_ENV:NAME]`.
//!    Values shorter than [`MIN_VALUE_CHARS`] characters and paths are not treated as
//!    secrets: they are too likely to occur in ordinary text.
//! 2. **Provider formats** (Anthropic, OpenAI, Google, AWS, GitHub, GitLab, Slack, Hugging
//!    Face, Stripe, npm, PyPI, Groq, xAI keys; JWTs; PEM private keys; `Bearer` tokens) →
//!    `[REDACTED_…]`.
//! 3. **URL credentials** (`scheme://user:password@host`) → `scheme://[REDACTED_CREDENTIALS]@host`.
//! 4. **Named values.** The value of `NAME=value`, `NAME: value`, `"name": "value"` and
//!    `--name value` where NAME looks secret, whatever the value → `NAME=[REDACTED]`
//!    (obvious non-secrets such as `true`, `0`, `$VAR` are kept).
//!
//! Most texts hold no credential at all: one pass of a `RegexSet` over the text says so
//! and the text is handed back untouched (the fast path every output tail takes).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use regex::{Captures, Regex, RegexSet};

/// Known values shorter than this many characters are not redacted as such (`admin`,
/// `github`, `1234` would blank out ordinary words); printed after their name they are
/// still caught by the named-value rule.
pub const MIN_VALUE_CHARS: usize = 8;

/// Marker of a named value.
const NAMED: &str = "[REDACTED]";

/// Provider key formats and URL credentials, in the order they are applied. `\b` is
/// ASCII-only (`(?-u:\b)`) everywhere: a Unicode word boundary makes the regex engine leave
/// its fast DFA on any non-ASCII text.
const PROVIDER_RULES: &[(&str, &str)] = &[
    (
        r"(?-u:\b)sk-ant-[A-Za-z0-9_-]{4,}",
        "[REDACTED_ANTHROPIC_KEY]",
    ),
    (
        r"(?-u:\b)sk-proj-[A-Za-z0-9_-]{4,}",
        "[REDACTED_OPENAI_KEY]",
    ),
    (
        r"(?-u:\b)sk-(?:svcacct|admin|None)-[A-Za-z0-9_-]{4,}",
        "[REDACTED_OPENAI_KEY]",
    ),
    // Legacy OpenAI keys and the many `sk-` look-alikes (OpenRouter, DeepSeek, …).
    (r"(?-u:\b)sk-[A-Za-z0-9_-]{20,}", "[REDACTED_OPENAI_KEY]"),
    (r"(?-u:\b)AIza[A-Za-z0-9_-]{30,}", "[REDACTED_GOOGLE_KEY]"),
    (
        r"(?-u:\b)(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?-u:\b)",
        "[REDACTED_AWS_KEY]",
    ),
    (
        r"(?-u:\b)gh[pousr]_[A-Za-z0-9]{20,}",
        "[REDACTED_GITHUB_TOKEN]",
    ),
    (
        r"(?-u:\b)github_pat_[A-Za-z0-9_]{20,}",
        "[REDACTED_GITHUB_TOKEN]",
    ),
    (
        r"(?-u:\b)glpat-[A-Za-z0-9_-]{16,}",
        "[REDACTED_GITLAB_TOKEN]",
    ),
    (
        r"(?-u:\b)(?:xox[abposre]|xapp)-[A-Za-z0-9-]{10,}",
        "[REDACTED_SLACK_TOKEN]",
    ),
    (r"(?-u:\b)hf_[A-Za-z0-9]{20,}", "[REDACTED_HF_TOKEN]"),
    (
        r"(?-u:\b)(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
        "[REDACTED_STRIPE_KEY]",
    ),
    (
        r"(?-u:\b)npm_[A-Za-z0-9]{36}(?-u:\b)",
        "[REDACTED_NPM_TOKEN]",
    ),
    (
        r"(?-u:\b)pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{20,}",
        "[REDACTED_PYPI_TOKEN]",
    ),
    (
        r"(?-u:\b)(?:gsk|xai)[_-][A-Za-z0-9]{20,}",
        "[REDACTED_API_KEY]",
    ),
    (
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        "[REDACTED_JWT]",
    ),
    // The whole block; a block cut off by the end of the text is redacted to its end.
    (
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
        "[REDACTED_PRIVATE_KEY]",
    ),
    // Rust's regex has no look-behind: keep the `Bearer ` prefix through a capture.
    (
        r"((?i:bearer)[ \t]+)[A-Za-z0-9._~+/=-]{16,}",
        "${1}[REDACTED_BEARER_TOKEN]",
    ),
    // Userinfo in URLs (`https://user:secret@host`): keep scheme and host.
    (
        r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@",
        "${1}[REDACTED_CREDENTIALS]@",
    ),
];

/// A name that may look secret: any identifier holding one of the secret words (the exact
/// decision is [`is_secret_name`]'s, on the match). `pat` only as a whole word, or every
/// `PATH=` would be a candidate.
const NAME: &str = r"[A-Za-z0-9_.-]*?(?:(?:key|token|secret|pass|pwd|cred|auth|cookie|dsn)[A-Za-z0-9_.-]*|pat(?:[_.-][A-Za-z0-9_.-]*)?)";

/// A value after `NAME=` / `NAME: `: quoted, or up to whitespace or punctuation that ends a
/// value in a command line, a URL query or a sentence. It never starts with `[`, so an
/// earlier rule's marker is not redacted again.
const VALUE: &str = r#""[^"\n]*"|'[^'\n]*'|[^\s"'`,;&<>(){}\[\]]+"#;

/// The named-value forms: plain (`NAME=value`, `NAME: value`, an HTTP header), JSON
/// (`"name": "value"`, also inside an escaped JSON string) and a command-line flag
/// (`--name value`).
static NAMED_FORMS: LazyLock<[String; 3]> = LazyLock::new(|| {
    [
        format!(
            r"(?i)(?-u:\b)({NAME})([ \t]*[=:][ \t]*)((?:(?:bearer|basic|token|digest)[ \t]+)?)({VALUE})"
        ),
        format!(r#"(?i)(\\?")({NAME})(\\?"[ \t]*:[ \t]*\\?")([^"\\\n]+)"#),
        format!(r"(?i)(--)({NAME})([ \t]+)({VALUE})"),
    ]
});

/// The compiled rules: provider formats in order, then the named-value forms.
struct Rules {
    provider: Vec<(Regex, &'static str)>,
    named: [Regex; 3],
}

static RULES: LazyLock<Rules> = LazyLock::new(|| {
    let compile = |p: &str| {
        Regex::new(p)
            .unwrap_or_else(|err| panic!("built-in redaction pattern does not compile: {err}"))
    };
    Rules {
        provider: PROVIDER_RULES
            .iter()
            .map(|(p, r)| (compile(p), *r))
            .collect(),
        named: [
            compile(&NAMED_FORMS[0]),
            compile(&NAMED_FORMS[1]),
            compile(&NAMED_FORMS[2]),
        ],
    }
});

/// The secret values known so far (value → the variable it came from), and the scanner
/// built from them and the rules. Registering a value that is already known changes
/// nothing; a new one rebuilds the scanner (rare: at start, and once per instrument
/// environment that adds a secret).
struct Known {
    values: BTreeMap<String, String>,
}

/// Everything one redaction needs, swapped as a whole when a value is registered.
struct Scanner {
    /// Every rule and (last) the known values, for the one-pass "anything here?" check.
    any: RegexSet,
    /// The known values as one alternation, longest first (so a value that contains
    /// another is replaced whole).
    values: Option<Regex>,
    /// Value → variable name, for the marker.
    names: BTreeMap<String, String>,
}

static KNOWN: LazyLock<Mutex<Known>> = LazyLock::new(|| {
    let mut known = Known {
        values: BTreeMap::new(),
    };
    known.add_env(std::env::vars_os());
    Mutex::new(known)
});

static SCANNER: LazyLock<RwLock<Arc<Scanner>>> = LazyLock::new(|| {
    let known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    RwLock::new(Arc::new(Scanner::build(&known.values)))
});

impl Known {
    /// Add the secret-looking variables of `vars`; true when a value is new.
    fn add_env<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        &mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> bool {
        let mut added = false;
        for (name, value) in vars {
            let (Some(name), Some(value)) = (name.as_ref().to_str(), value.as_ref().to_str())
            else {
                continue;
            };
            if is_secret_name(name) {
                added |= self.add(name, value);
            }
        }
        added
    }

    /// Add `value` (each of its lines, for a multi-line value such as a PEM key) as the
    /// secret of `name`; true when something is new.
    fn add(&mut self, name: &str, value: &str) -> bool {
        let mut added = false;
        for line in value.lines().map(str::trim) {
            if !worth_knowing(line) || self.values.contains_key(line) {
                continue;
            }
            self.values.insert(line.to_string(), name.to_string());
            added = true;
        }
        added
    }
}

/// A value that is specific enough to redact wherever it appears.
fn worth_knowing(value: &str) -> bool {
    value.chars().count() >= MIN_VALUE_CHARS
        // Paths name where a secret is, not the secret (GOOGLE_APPLICATION_CREDENTIALS).
        && !value.starts_with('/')
        && !value.starts_with("~/")
        && !value.starts_with("./")
        // PEM armour lines are the same in every key.
        && !value.starts_with("-----")
        && !is_placeholder(value)
}

impl Scanner {
    fn build(values: &BTreeMap<String, String>) -> Scanner {
        let mut patterns: Vec<String> = PROVIDER_RULES.iter().map(|(p, _)| p.to_string()).collect();
        patterns.extend(NAMED_FORMS.iter().cloned());
        let alternation = (!values.is_empty()).then(|| {
            let mut sorted: Vec<&String> = values.keys().collect();
            sorted.sort_by_key(|v| std::cmp::Reverse(v.len()));
            sorted
                .iter()
                .map(|v| regex::escape(v))
                .collect::<Vec<_>>()
                .join("|")
        });
        // A value that cannot be compiled (far too many, far too long) must not disable
        // every other rule: it is left out, and said so.
        let values_re = alternation.as_deref().and_then(|a| match Regex::new(a) {
            Ok(re) => Some(re),
            Err(err) => {
                tracing::warn!(%err, "cannot match the secret environment values; the other redaction rules still apply");
                None
            }
        });
        if let Some(re) = &values_re {
            patterns.push(re.as_str().to_string());
        }
        let any = RegexSet::new(&patterns)
            .unwrap_or_else(|err| panic!("built-in redaction patterns do not compile: {err}"));
        Scanner {
            any,
            values: values_re,
            names: values.clone(),
        }
    }

    fn current() -> Arc<Scanner> {
        Arc::clone(&SCANNER.read().unwrap_or_else(|p| p.into_inner()))
    }
}

fn rebuild(known: &Known) {
    let scanner = Arc::new(Scanner::build(&known.values));
    *SCANNER.write().unwrap_or_else(|p| p.into_inner()) = scanner;
}

/// Learn the secret values of `vars` — an instrument's environment, or any environment a
/// child of the conductor gets: the value of every variable whose name looks secret is
/// redacted from then on, wherever it appears.
pub fn register_env<K: AsRef<OsStr>, V: AsRef<OsStr>>(vars: impl IntoIterator<Item = (K, V)>) {
    // The scanner first: building it takes the lock taken here.
    prime();
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    if known.add_env(vars) {
        rebuild(&known);
    }
}

/// Learn `value` as a secret whatever `name` looks like (an API key read from the variable
/// a score named with `api_key_env`).
pub fn register_value(name: &str, value: &str) {
    prime();
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    if known.add(name, value) {
        rebuild(&known);
    }
}

/// Read the process's environment into the known values now rather than on the first
/// redaction (the conductor calls it at start).
pub fn prime() {
    let _ = Scanner::current();
}

/// Words that make a name secret (`API_KEY`, `apiKey`, `GITHUB_TOKEN`, `db_password`).
const SECRET_WORDS: &[&str] = &[
    "key",
    "keys",
    "apikey",
    "apikeys",
    "token",
    "secret",
    "secrets",
    "password",
    "passwords",
    "passwd",
    "pass",
    "pwd",
    "passphrase",
    "credential",
    "credentials",
    "cred",
    "creds",
    "auth",
    "oauth",
    "authorization",
    "bearer",
    "cookie",
    "cookies",
    "pat",
    "dsn",
    "privatekey",
];

/// Word endings that make a word secret (`authtoken`, `clientsecret`, `dbpassword`).
const SECRET_ENDINGS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
    "authkey",
];

/// Word beginnings that make a word secret (`secretkey`, `credentialsfile` is caught by
/// the qualifier rule below).
const SECRET_BEGINNINGS: &[&str] = &["secret", "password", "passwd", "credential"];

/// A last word that says the value is *about* a secret, not the secret (`TOKEN_COUNT`,
/// `max_key_length`, `SSH_AUTH_SOCK`, `AUTH_TYPE`, `apiKeySource`).
const QUALIFIERS: &[&str] = &[
    "count",
    "counts",
    "limit",
    "limits",
    "usage",
    "budget",
    "max",
    "min",
    "total",
    "type",
    "types",
    "kind",
    "method",
    "mode",
    "path",
    "paths",
    "file",
    "files",
    "dir",
    "url",
    "uri",
    "endpoint",
    "host",
    "port",
    "name",
    "names",
    "id",
    "ids",
    "length",
    "len",
    "size",
    "env",
    "var",
    "expiry",
    "expires",
    "expiration",
    "ttl",
    "timeout",
    "sock",
    "socket",
    "source",
    "header",
    "field",
    "enabled",
    "disabled",
    "required",
    "provider",
    "helper",
    "command",
    "cmd",
    "format",
    "prefix",
    "version",
    "status",
    "hint",
    "index",
    "idx",
];

/// Calls `f` with each word of an identifier, as written: split at every non-alphanumeric
/// character and at camel-case boundaries (`apiKey` → api, Key; `APIKey` → API, Key).
/// Slices of `name`, compared without case by the callers: asked for every `NAME=value`
/// the rules meet, it allocates nothing.
fn each_word<'n>(name: &'n str, mut f: impl FnMut(&'n str)) {
    for part in name.split(|c: char| !c.is_ascii_alphanumeric()) {
        // ASCII letters and digits only: a byte is a character.
        let bytes = part.as_bytes();
        let mut start = 0;
        for i in 1..bytes.len() {
            let (p, c) = (bytes[i - 1], bytes[i]);
            let next = bytes.get(i + 1).copied();
            let boundary = c.is_ascii_uppercase()
                && (p.is_ascii_lowercase()
                    || p.is_ascii_digit()
                    || (p.is_ascii_uppercase() && next.is_some_and(|n| n.is_ascii_lowercase())));
            if boundary {
                f(&part[start..i]);
                start = i;
            }
        }
        if start < part.len() {
            f(&part[start..]);
        }
    }
}

/// The words of an identifier, lower-cased ([`each_word`]).
#[cfg(test)]
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    each_word(name, |w| out.push(w.to_ascii_lowercase()));
    out
}

/// Whether `word` ends with `ending`, ASCII case ignored.
fn ends_with_ignore_case(word: &str, ending: &str) -> bool {
    word.len() >= ending.len()
        && word.as_bytes()[word.len() - ending.len()..].eq_ignore_ascii_case(ending.as_bytes())
}

/// Whether `word` starts with `beginning`, ASCII case ignored.
fn starts_with_ignore_case(word: &str, beginning: &str) -> bool {
    word.len() >= beginning.len()
        && word.as_bytes()[..beginning.len()].eq_ignore_ascii_case(beginning.as_bytes())
}

/// Whether a variable or field named `name` holds a secret: one of its words is a secret
/// word (`*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*CREDENTIAL*`,
/// `*AUTH*`, `*COOKIE*`, …, case-insensitive, as whole words: `MONKEY`, `AUTHOR`, `tokens`
/// are not), and its last word is not a qualifier that makes it *about* a secret
/// (`TOKEN_COUNT`, `SSH_AUTH_SOCK`, `API_KEY_FILE`). `PWD` / `OLDPWD` are directories.
pub fn is_secret_name(name: &str) -> bool {
    if name.eq_ignore_ascii_case("pwd") || name.eq_ignore_ascii_case("oldpwd") {
        return false;
    }
    let (mut count, mut last, mut secret) = (0usize, "", false);
    each_word(name, |w| {
        count += 1;
        last = w;
        secret = secret
            || SECRET_WORDS.iter().any(|s| s.eq_ignore_ascii_case(w))
            || SECRET_ENDINGS.iter().any(|e| ends_with_ignore_case(w, e))
            || SECRET_BEGINNINGS
                .iter()
                .any(|b| starts_with_ignore_case(w, b));
    });
    if count == 0 {
        return false;
    }
    if count > 1 && QUALIFIERS.iter().any(|q| q.eq_ignore_ascii_case(last)) {
        return false;
    }
    secret
}

/// A value that is obviously not a secret: a switch, a number 0/1, a shell or template
/// reference, a mask, an earlier marker.
pub fn is_placeholder(value: &str) -> bool {
    let v = value.trim();
    const WORDS: &[&str] = &[
        "",
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
        "none",
        "null",
        "nil",
        "undefined",
        "unset",
        "required",
        "optional",
        "0",
        "1",
        "redacted",
    ];
    WORDS.iter().any(|w| v.eq_ignore_ascii_case(w))
        || v.starts_with('$')
        || v.starts_with('%')
        || v.starts_with("{{")
        || v.starts_with("[REDACTED")
        || v.chars().all(|c| matches!(c, '*' | '.' | 'x' | 'X' | '•'))
}

/// The four secret words that are a secret whatever follows them after a colon; for the
/// others (`key`, `token`, `auth`, …) a colon and a plain word is prose ("invalid API key:
/// please log in"), not a value.
const STRONG_WORDS: &[&str] = &["password", "passwd", "passphrase", "secret"];

/// Whether the named-value match `name`, `separator`, `value` is to be redacted.
fn redact_named(name: &str, separator: &str, value: &str) -> bool {
    let inner = value.trim_matches(|c| c == '"' || c == '\'');
    if !is_secret_name(name) || is_placeholder(inner) {
        return false;
    }
    // An exception's name (`KeyError: 'nope'`, `TokenExpiredError: …`) names what went
    // wrong, not a secret the value would be.
    if name.ends_with("Error") || name.ends_with("Exception") {
        return false;
    }
    let prose_name = name.chars().all(|c| c.is_ascii_alphabetic())
        && name.chars().skip(1).all(|c| c.is_ascii_lowercase());
    let colon = separator.contains(':');
    // `auth.go:3: unused variable`, `token_server:8443`: a line number or a port after a
    // colon is a location, not a credential (a password is one whatever follows).
    let strong = STRONG_WORDS
        .iter()
        .any(|w| name.to_ascii_lowercase().contains(w));
    let digits = inner.trim_end_matches(':');
    if colon
        && !strong
        && !digits.is_empty()
        && digits.len() <= 6
        && digits.chars().all(|c| c.is_ascii_digit())
    {
        return false;
    }
    if colon && prose_name && !STRONG_WORDS.contains(&name.to_ascii_lowercase().as_str()) {
        // "Invalid token: expired" keeps its word; "token: 4f9a…" loses its value.
        let prose_value = inner.chars().all(|c| c.is_ascii_alphabetic()) && inner.len() < 20;
        return !prose_value;
    }
    true
}

/// The marker for a named value, keeping its quotes.
fn named_marker(value: &str) -> String {
    match value.chars().next() {
        Some(q @ ('"' | '\'')) if value.len() >= 2 && value.ends_with(q) => {
            format!("{q}{NAMED}{q}")
        }
        _ => NAMED.to_string(),
    }
}

/// `text` with every match of `re` replaced by `replace` (the text itself when none).
fn apply<'t>(
    text: Cow<'t, str>,
    re: &Regex,
    replace: impl Fn(&Captures<'_>) -> String,
) -> Cow<'t, str> {
    let replaced = match re.replace_all(&text, |c: &Captures<'_>| replace(c)) {
        Cow::Borrowed(_) => None,
        Cow::Owned(s) => Some(s),
    };
    match replaced {
        Some(s) => Cow::Owned(s),
        None => text,
    }
}

/// `text` with the matches of `re` for which `replace` gives a replacement replaced; the
/// text itself when it gives none. The named-value forms match many a harmless `name=value`
/// (`validations_passed=1` in every log line of a completed sheet): those cost no copy.
fn apply_some<'t>(
    text: Cow<'t, str>,
    re: &Regex,
    replace: impl Fn(&Captures<'_>) -> Option<String>,
) -> Cow<'t, str> {
    let mut out: Option<String> = None;
    let mut last = 0;
    for c in re.captures_iter(&text) {
        let (Some(whole), Some(to)) = (c.get(0), replace(&c)) else {
            continue;
        };
        let o = out.get_or_insert_with(|| String::with_capacity(text.len() + 16));
        o.push_str(&text[last..whole.start()]);
        o.push_str(&to);
        last = whole.end();
    }
    match out {
        None => text,
        Some(mut o) => {
            o.push_str(&text[last..]);
            Cow::Owned(o)
        }
    }
}

/// [`redact`] that hands `text` back as it is (no copy) when it holds nothing to redact.
pub fn redact_cow(text: &str) -> Cow<'_, str> {
    let scanner = Scanner::current();
    // Usually nothing matches and the text is handed back as it is. A plain search says
    // so: it stops at a first match, allocates nothing, and costs the lazy DFA a fraction
    // of the overlapping search that tells which rules match (issue 24: ~15 texts a sheet).
    if !scanner.any.is_match(text) {
        return Cow::Borrowed(text);
    }
    // One pass says which rules match. A rule that does not match the text as given does
    // not match after the others have replaced what they match either (their markers hold
    // nothing a rule matches), so only the matching rules run.
    let hits = scanner.any.matches(text);
    let rules = &*RULES;
    let provider = rules.provider.len();
    let mut out = Cow::Borrowed(text);
    if let Some(values) = scanner
        .values
        .as_ref()
        .filter(|_| hits.matched(provider + 3))
    {
        out = apply(out, values, |c| {
            let name = scanner.names.get(&c[0]).map_or("SECRET", String::as_str);
            format!("[REDACTED_ENV:{name}]")
        });
    }
    for (i, (re, replacement)) in rules.provider.iter().enumerate() {
        if hits.matched(i) {
            out = apply(out, re, |c| {
                let mut to = String::new();
                c.expand(replacement, &mut to);
                to
            });
        }
    }
    let [plain, json, flag] = &rules.named;
    if hits.matched(provider) {
        out = apply_some(out, plain, |c| {
            redact_named(&c[1], &c[2], &c[4])
                .then(|| format!("{}{}{}{}", &c[1], &c[2], &c[3], named_marker(&c[4])))
        });
    }
    if hits.matched(provider + 1) {
        out = apply_some(out, json, |c| {
            redact_named(&c[2], "=", &c[4]).then(|| format!("{}{}{}{NAMED}", &c[1], &c[2], &c[3]))
        });
    }
    if hits.matched(provider + 2) {
        out = apply_some(out, flag, |c| {
            redact_named(&c[2], "=", &c[4])
                .then(|| format!("{}{}{}{}", &c[1], &c[2], &c[3], named_marker(&c[4])))
        });
    }
    out
}

/// [`redact`] of an owned text, handed back as it is when it holds nothing to redact.
pub fn redact_owned(text: String) -> String {
    match redact_cow(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(redacted) => redacted,
    }
}

/// Redact `text` where it is.
pub fn redact_in_place(text: &mut String) {
    if let Cow::Owned(redacted) = redact_cow(text) {
        *text = redacted;
    }
}

/// Replace secrets (known values, API keys, tokens, URL credentials, secret-named values)
/// with `[REDACTED…]` markers.
pub fn redact(text: &str) -> String {
    redact_cow(text).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

#[cfg(test)]
mod key_error_tests {
    /// A `skip_when` error naming a missing key is not taken for a secret's name and value.
    #[test]
    fn a_key_error_is_not_a_secret() {
        for text in [
            "skip_when expression failed: KeyError: 7",
            "skip_when expression failed: KeyError: 'nope'",
        ] {
            assert_eq!(super::redact(text), text);
        }
    }
}
