//! Editing `conductor.yaml` (`mozart config set|init|show`): read the file as the conductor
//! reads it (YAML 1.1 through `mozart-yaml`), set a dotted key, check the whole new file with
//! the conductor's own loader, and write it back atomically.
//!
//! The file is re-emitted from the loaded tree by [`emit`]: every value the user had loads
//! back the same (comments are not kept, as before).

use std::path::{Path, PathBuf};

use mozart_conductor::DaemonConfig;
use mozart_yaml::{Node, NodeKind};

/// Why a conductor.yaml could not be read, changed or written.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file exists but could not be read.
    #[error("Cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not YAML.
    #[error("Invalid config: {} — {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The loader's message, with the line.
        message: String,
    },
    /// The top level of the file is a list or a scalar.
    #[error("Invalid config: {} — the top level is not a mapping", path.display())]
    NotMapping {
        /// The file.
        path: PathBuf,
    },
    /// The dotted key has an empty part (`a..b`, `.a`).
    #[error("Invalid key '{0}'")]
    InvalidKey(String),
    /// The value given on the command line does not fit the key; the file is unchanged.
    #[error("Cannot set {key} to '{value}': {reason} ({} is unchanged)", path.display())]
    BadValue {
        /// The dotted key.
        key: String,
        /// The value as given.
        value: String,
        /// What the key takes.
        reason: String,
        /// The file.
        path: PathBuf,
    },
    /// The key given on the command line is not a conductor.yaml key; the file is unchanged.
    #[error("Unknown key '{key}': conductor.yaml has no such setting ({} is unchanged)", path.display())]
    UnknownKey {
        /// The dotted key.
        key: String,
        /// The closest known key.
        suggestion: Option<String>,
        /// The file.
        path: PathBuf,
    },
    /// The file did not load before the change either, for the same reason; it is unchanged.
    #[error("Invalid config: {0} (the file was invalid before this change; it is unchanged)")]
    AlreadyInvalid(String),
    /// The new file could not be written.
    #[error("Cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl ConfigFileError {
    /// What the user can do about it.
    pub fn hints(&self) -> Vec<String> {
        match self {
            ConfigFileError::InvalidKey(_) => {
                vec!["Use a dotted key such as learning.enabled.".into()]
            }
            ConfigFileError::BadValue { .. } => {
                vec!["Run 'mozart config show --all' to see current values.".into()]
            }
            ConfigFileError::UnknownKey { suggestion, .. } => {
                let mut hints: Vec<String> = suggestion
                    .iter()
                    .map(|s| format!("Did you mean '{s}'?"))
                    .collect();
                hints.push("List the keys: mozart config show --all".into());
                hints
            }
            _ => Vec::new(),
        }
    }
}

fn node(kind: NodeKind) -> Node {
    // Line 0: not from the user's file.
    Node {
        kind,
        line: 0,
        col: 0,
    }
}

fn empty_mapping() -> Node {
    node(NodeKind::Map(Vec::new()))
}

/// The file's top-level mapping (empty for a missing or empty file), read with YAML 1.1's
/// rules as the conductor reads it (`enabled: yes` is true).
pub fn read_mapping(path: &Path) -> Result<Node, ConfigFileError> {
    if !path.exists() {
        return Ok(empty_mapping());
    }
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let parsed = mozart_yaml::parse(&text).map_err(|e| ConfigFileError::Syntax {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    match parsed {
        None => Ok(empty_mapping()),
        Some(n) if matches!(n.kind, NodeKind::Null) => Ok(empty_mapping()),
        Some(n) if matches!(n.kind, NodeKind::Map(_)) => Ok(n),
        Some(_) => Err(ConfigFileError::NotMapping {
            path: path.to_path_buf(),
        }),
    }
}

/// The file's own values as JSON (`None` when it is missing or does not load): what
/// `config show` marks as `file` rather than `default`.
pub fn file_values(path: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path).ok()?;
    mozart_yaml::from_str(&text).ok()
}

/// Upstream's value coercion (case-insensitive): booleans, null, int, float, else text.
pub fn coerce(raw: &str) -> Node {
    let kind = match raw.to_lowercase().as_str() {
        "true" | "yes" => NodeKind::Bool(true),
        "false" | "no" => NodeKind::Bool(false),
        "null" | "none" | "~" => NodeKind::Null,
        _ => match (raw.parse::<i64>(), raw.parse::<f64>()) {
            (Ok(i), _) => NodeKind::Int(i),
            (_, Ok(f)) => NodeKind::Float(f),
            _ => NodeKind::Str(raw.to_string()),
        },
    };
    node(kind)
}

/// Keys whose value is a secret: `config set` does not print it back.
pub fn is_secret_key(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    ["token", "password", "secret", "api_key"]
        .iter()
        .any(|word| last.contains(word))
}

/// A value as conductor.yaml spells it (upstream printed Python's `repr`: `True`, `None`,
/// `'debug'`).
pub fn value_text(value: &Node) -> String {
    match &value.kind {
        NodeKind::Str(s) | NodeKind::Date(s) => s.clone(),
        NodeKind::Seq(_) | NodeKind::Map(_) => emit(value).trim().to_string(),
        _ => scalar_text(value),
    }
}

/// Set the dotted `key` in `doc`, turning anything on the way into a mapping; a new key goes
/// last, an existing one keeps its place.
pub fn set_dotted(doc: &mut Node, key: &str, value: Node) -> Result<(), ConfigFileError> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigFileError::InvalidKey(key.to_string()));
    }
    let mut at = doc;
    for (i, part) in parts.iter().enumerate() {
        if !matches!(at.kind, NodeKind::Map(_)) {
            at.kind = NodeKind::Map(Vec::new());
        }
        let NodeKind::Map(entries) = &mut at.kind else {
            return Ok(()); // made a mapping just above
        };
        let pos = match entries.iter().position(|(k, _)| k.key_text() == *part) {
            Some(pos) => pos,
            None => {
                entries.push((node(NodeKind::Str(part.to_string())), empty_mapping()));
                entries.len() - 1
            }
        };
        if i + 1 == parts.len() {
            entries[pos].1 = value;
            return Ok(());
        }
        at = &mut entries[pos].1;
    }
    Ok(())
}

/// Set `key` to the coerced `raw` in the file at `path`: the whole new file must load as the
/// conductor loads it before it replaces the old one (which stays as it was otherwise).
/// Returns the value set.
pub fn set_key(path: &Path, key: &str, raw: &str) -> Result<Node, ConfigFileError> {
    // Read, change and write under the file's lock: two `config set` at once each keep the
    // other's value (without it the last writer's copy of the old file won).
    let _lock = lock_file(path)?;
    let mut doc = read_mapping(path)?;
    let value = coerce(raw);
    set_dotted(&mut doc, key, value.clone())?;
    check_known_key(path, key)?;
    // Checked as the tree, not as the text to write: the lines an error names stay the
    // user's (the new value has none).
    // What `mozart start` would refuse (a log or socket directory it cannot create) is
    // refused here too.
    let loads = |doc: &Node| {
        DaemonConfig::from_node(Some(doc), path).and_then(|c| c.check_paths(path, true))
    };
    if let Err(e) = loads(&doc) {
        let message = e.to_string();
        // The same failure without the new value: it is the file's, not the value's (a value
        // that mends the file is still set; only a file that stays broken the same way is).
        let before = read_mapping(path).ok().and_then(|old| loads(&old).err());
        if before.is_some_and(|b| b.to_string() == message) {
            return Err(ConfigFileError::AlreadyInvalid(message));
        }
        // The value on the command line is wrong, not the file: said as such, with the
        // range the key really takes.
        let mut reason = loader_reason(path, &message, key);
        if reason.contains("must be a whole number") {
            if let Some(bound) = bound_of(&doc, path, key) {
                let bound = bound.strip_prefix("must be ").unwrap_or(&bound);
                reason = format!("must be a whole number {bound}");
            }
        }
        return Err(ConfigFileError::BadValue {
            key: key.to_string(),
            value: raw.to_string(),
            reason,
            path: path.to_path_buf(),
        });
    }
    write_atomic(path, &emit(&doc))?;
    Ok(value)
}

/// Every dotted key conductor.yaml has (the leaves of the defaults, `dashboard.*` included).
pub fn known_keys() -> Vec<String> {
    fn walk(prefix: &str, value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }
    let mut out = Vec::new();
    walk("", &document(&DaemonConfig::default()), &mut out);
    out.retain(|k| k != "config_file");
    out
}

/// A key that is neither a setting nor a section is refused before the file is touched.
fn check_known_key(path: &Path, key: &str) -> Result<(), ConfigFileError> {
    let keys = known_keys();
    let section = format!("{key}.");
    if keys.iter().any(|k| k == key || k.starts_with(&section)) {
        return Ok(());
    }
    let candidates: std::collections::HashSet<String> = keys.into_iter().collect();
    Err(ConfigFileError::UnknownKey {
        key: key.to_string(),
        suggestion: mozart_config::validate::close_match(key, &candidates),
        path: path.to_path_buf(),
    })
}

/// The loader's complaint about `key` without the file's frame (its path, a line of the
/// file, "Correct it in the file"): what is wrong with the value given.
fn loader_reason(path: &Path, message: &str, key: &str) -> String {
    let framed = format!("invalid conductor config {}: ", path.display());
    let mut text = message.strip_prefix(&framed).unwrap_or(message);
    if let Some(rest) = text.strip_prefix("line ") {
        if let Some((digits, after)) = rest.split_once(": ") {
            if digits.chars().all(|c| c.is_ascii_digit()) {
                text = after;
            }
        }
    }
    let text = text
        .split(". Correct it in the file")
        .next()
        .unwrap_or(text);
    let field = format!("field '{key}': ");
    let plain = format!("{key}: ");
    text.strip_prefix(&field)
        .or_else(|| text.strip_prefix(&plain))
        .unwrap_or(text)
        .to_string()
}

/// The range the validator puts on an integer `key` (`must be from 1 to 50`), found by
/// trying its extremes in `doc`.
fn bound_of(doc: &Node, path: &Path, key: &str) -> Option<String> {
    ["0", "4294967295"].iter().find_map(|probe| {
        let mut trial = doc.clone();
        set_dotted(&mut trial, key, coerce(probe)).ok()?;
        let err = DaemonConfig::from_node(Some(&trial), path)
            .err()?
            .to_string();
        let reason = loader_reason(path, &err, key);
        if reason.contains("whole number") || reason.contains("unknown field") {
            return None;
        }
        // "must be from 1 to 50, not 0" → "must be from 1 to 50".
        Some(match reason.rsplit_once(", not ") {
            Some((bound, _)) => bound.to_string(),
            None => reason,
        })
    })
}

/// Hold an exclusive `flock` on `<file>.lock` (beside the file) until the guard is dropped:
/// every read-modify-write of the file takes it.
pub fn lock_file(path: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, ConfigFileError> {
    use std::os::unix::fs::OpenOptionsExt;
    let lock_path = path.with_extension("yaml.lock");
    let write_error = |source: std::io::Error| ConfigFileError::Write {
        path: lock_path.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        create_dir_private(dir).map_err(write_error)?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(write_error)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| write_error(std::io::Error::from(errno)))
}

/// Create `dir` and its missing parents 0700 (the Mozart home is private whichever command
/// creates it; an existing directory keeps its mode).
fn create_dir_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Write `text` to `path` through a temporary file and a rename (never a half-written file).
/// The file is private (0600): it may hold `dashboard.token`.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), ConfigFileError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        create_dir_private(dir).map_err(|source| ConfigFileError::Write {
            path: path.to_path_buf(),
            source,
        })?;
    }
    let tmp = path.with_extension("yaml.tmp");
    let _ = std::fs::remove_file(&tmp);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| {
            // Whatever the umask: 0600, never more.
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            file.write_all(text.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            ConfigFileError::Write {
                path: path.to_path_buf(),
                source,
            }
        })
}

/// The defaults as a YAML document (paths the conductor derives stay unset).
pub fn defaults_yaml() -> String {
    let mut value = document(&DaemonConfig::default());
    if let Some(obj) = value.as_object_mut() {
        obj.remove("config_file");
    }
    emit(&from_json(&value))
}

/// Every key of a config, as `config init` writes it and `config show` lists it: the
/// serialized config plus `dashboard:`, which `daemon.config` leaves out (its token must not
/// travel); a token set is shown as `(hidden)`, never its text.
pub fn document(config: &DaemonConfig) -> serde_json::Value {
    let mut value = serde_json::to_value(config).unwrap_or_default();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("dashboard".into(), dashboard_document(config));
    }
    value
}

/// The `dashboard:` section as [`document`] shows it.
pub fn dashboard_document(config: &DaemonConfig) -> serde_json::Value {
    let d = &config.dashboard;
    serde_json::json!({
        "enabled": d.enabled,
        "host": d.host,
        "port": d.port,
        "token": d.token.as_ref().map(|_| "(hidden)"),
    })
}

/// What `mozart config init` writes: every default, under a header saying how to change it.
pub fn init_text() -> String {
    format!(
        "# Mozart conductor configuration (every default written out).\n# Change a key with: mozart config set KEY VALUE\n{}",
        defaults_yaml()
    )
}

/// A JSON value as a tree to emit.
fn from_json(value: &serde_json::Value) -> Node {
    use serde_json::Value;
    node(match value {
        Value::Null => NodeKind::Null,
        Value::Bool(b) => NodeKind::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => NodeKind::Int(i),
            None => NodeKind::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => NodeKind::Str(s.clone()),
        Value::Array(items) => NodeKind::Seq(items.iter().map(from_json).collect()),
        Value::Object(map) => NodeKind::Map(
            map.iter()
                .map(|(k, v)| (node(NodeKind::Str(k.clone())), from_json(v)))
                .collect(),
        ),
    })
}

/// The tree as block-style YAML that loads back (YAML 1.1, PyYAML's rules) to the same
/// values: text that would read as anything else (`yes`, `012`, `a: b`) is quoted.
pub fn emit(doc: &Node) -> String {
    let mut out = String::new();
    match &doc.kind {
        NodeKind::Map(entries) if !entries.is_empty() => emit_map(entries, 0, &mut out),
        NodeKind::Seq(items) if !items.is_empty() => emit_seq(items, 0, &mut out),
        _ => {
            out.push_str(&scalar_text(doc));
            out.push('\n');
        }
    }
    out
}

fn emit_map(entries: &[(Node, Node)], indent: usize, out: &mut String) {
    for (key, value) in entries {
        out.push_str(&" ".repeat(indent));
        out.push_str(&scalar_text(key));
        out.push(':');
        emit_child(value, indent, true, out);
    }
}

fn emit_seq(items: &[Node], indent: usize, out: &mut String) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        emit_child(item, indent, false, out);
    }
}

/// A value after `key:` or `-`: on the same line when it is a scalar or empty, else block
/// below, two spaces in (a list under a key at the key's own indent, as serde_yaml wrote it).
fn emit_child(value: &Node, indent: usize, under_key: bool, out: &mut String) {
    match &value.kind {
        NodeKind::Map(entries) if !entries.is_empty() => {
            out.push('\n');
            emit_map(entries, indent + 2, out);
        }
        NodeKind::Seq(items) if !items.is_empty() => {
            out.push('\n');
            emit_seq(items, if under_key { indent } else { indent + 2 }, out);
        }
        _ => {
            out.push(' ');
            out.push_str(&scalar_text(value));
            out.push('\n');
        }
    }
}

/// One scalar (or an empty collection) as YAML text that reads back as the same value.
fn scalar_text(value: &Node) -> String {
    match &value.kind {
        NodeKind::Null => "null".into(),
        NodeKind::Bool(b) => if *b { "true" } else { "false" }.into(),
        NodeKind::Int(i) => i.to_string(),
        NodeKind::Float(f) => float_text(*f),
        // A date was written plain and reads back as one.
        NodeKind::Date(s) => s.clone(),
        NodeKind::Str(s) => string_text(s),
        NodeKind::Seq(_) => "[]".into(),
        NodeKind::Map(_) => "{}".into(),
    }
}

/// A float in YAML 1.1's float syntax (a `.` always; an exponent with its sign).
fn float_text(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let text = format!("{f:?}");
    match text.split_once('e') {
        Some((mantissa, exp)) => {
            let mantissa = if mantissa.contains('.') {
                mantissa.to_string()
            } else {
                format!("{mantissa}.0")
            };
            let exp = if exp.starts_with('-') {
                exp.to_string()
            } else {
                format!("+{exp}")
            };
            format!("{mantissa}e{exp}")
        }
        None if text.contains('.') => text,
        None => format!("{text}.0"),
    }
}

/// Text plain when it reads back as the same text, else single-quoted, or double-quoted
/// when it holds a character that needs an escape.
fn string_text(s: &str) -> String {
    let plain_chars = s
        .chars()
        .all(|c| c.is_alphanumeric() || " _-./~+=$()@%^".contains(c));
    let first_ok = s
        .chars()
        .next()
        .is_some_and(|c| c.is_alphanumeric() || "_./~$(".contains(c));
    let same = matches!(mozart_yaml::resolve_plain(s.to_string()), NodeKind::Str(ref t) if t == s);
    if plain_chars && first_ok && !s.ends_with(' ') && same {
        return s.to_string();
    }
    let escapes = s
        .chars()
        .any(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}'));
    if !escapes {
        // Single quotes need no escapes but their own doubling.
        return format!("'{}'", s.replace('\'', "''"));
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            // Controls, and what YAML reads as a line break or a byte-order mark.
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn values_are_coerced_like_upstream() {
        assert_eq!(value_text(&coerce("YES")), "true");
        assert_eq!(value_text(&coerce("none")), "null");
        assert_eq!(value_text(&coerce("12")), "12");
        assert_eq!(value_text(&coerce("2.5")), "2.5");
        assert_eq!(value_text(&coerce("3e2")), "300.0");
        assert_eq!(value_text(&coerce("debug")), "debug");
    }

    #[test]
    fn the_written_defaults_load_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conductor.yaml");
        std::fs::write(&path, init_text()).unwrap();
        let loaded = DaemonConfig::load(Some(&path), None).unwrap();
        let expected = DaemonConfig {
            config_file: loaded.config_file.clone(),
            ..DaemonConfig::default()
        };
        assert_eq!(loaded, expected);
    }

    /// Every value that needs quoting, and every YAML 1.1 value, reads back as itself.
    #[test]
    fn emitted_text_loads_back_to_the_same_values() {
        let text = "y: \"nel\\x85 bell\\x07\"\na: yes\nb: 'yes'\nc: '012'\nd: 012\ne: 'a: b'\nf: '#x'\ng: \"two\\nlines\"\nh: ''\ni: ' pad'\nj: 1.0e+20\nk: .inf\nl: 2024-01-01\nm: '2024-01-01'\nn: ~\no: [1, [], {}]\np: {q: {r: '*.pyc'}}\n2: int key\ns: 'null'\nt: \"tab\\there\"\nu: 1.5\nv: -3\nw: \"quote\\\" and \\\\ back\"\nx: ~/.mozart/monitor.db\n";
        let before = mozart_yaml::parse(text).unwrap().unwrap();
        let again = emit(&before);
        let after = mozart_yaml::parse(&again).unwrap().unwrap();
        let strip = |n: &Node| n.repr();
        assert_eq!(strip(&before), strip(&after), "emitted:\n{again}");
        assert!(again.contains("x: ~/.mozart/monitor.db\n"), "{again}");
    }

    #[test]
    fn set_keeps_every_other_value_and_refuses_a_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conductor.yaml");
        std::fs::write(
            &path,
            "# mine\nlog_level: debug\ndashboard:\n  enabled: yes\n  host: 127.0.0.1\nobserver:\n  exclude_patterns: ['*.pyc', .git/]\n",
        )
        .unwrap();
        set_key(&path, "learning.enabled", "no").unwrap();
        set_key(&path, "max_concurrent_jobs", "4").unwrap();
        let c = DaemonConfig::load(Some(&path), None).unwrap();
        assert_eq!(c.log_level, "debug");
        assert!(c.dashboard.enabled);
        assert!(!c.learning.enabled);
        assert_eq!(c.max_concurrent_jobs, 4);
        assert_eq!(c.observer.exclude_patterns, vec!["*.pyc", ".git/"]);
        let before = std::fs::read_to_string(&path).unwrap();
        let err = set_key(&path, "max_concurrent_jobs", "99").unwrap_err();
        assert!(matches!(err, ConfigFileError::BadValue { .. }), "{err}");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
        assert!(matches!(
            set_key(&path, "a..b", "1").unwrap_err(),
            ConfigFileError::InvalidKey(_)
        ));
        // A bad value already in the file is named at its line in the file.
        std::fs::write(&path, "# mine\n\nsocket:\n  backlog: lots\n").unwrap();
        let err = set_key(&path, "log_level", "info").unwrap_err().to_string();
        assert!(err.contains("line 4: socket.backlog"), "{err}");
        std::fs::write(&path, "- a\n").unwrap();
        assert!(matches!(
            set_key(&path, "log_level", "info").unwrap_err(),
            ConfigFileError::NotMapping { .. }
        ));
    }

    /// A file already broken is not blamed on the value being set, and a value that mends
    /// it is set.
    #[test]
    fn a_file_broken_before_the_change_is_named_as_such_and_can_be_mended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conductor.yaml");
        std::fs::write(
            &path,
            "# mine

socket:
  backlog: lots
",
        )
        .unwrap();
        let err = set_key(&path, "log_level", "info").unwrap_err();
        assert!(matches!(err, ConfigFileError::AlreadyInvalid(_)), "{err}");
        assert!(
            err.to_string().contains("invalid before this change"),
            "{err}"
        );
        assert!(matches!(
            set_key(&path, "socket.backlog", "many").unwrap_err(),
            ConfigFileError::BadValue { .. }
        ));
        set_key(&path, "socket.backlog", "64").unwrap();
        assert_eq!(
            DaemonConfig::load(Some(&path), None)
                .unwrap()
                .socket
                .backlog,
            64
        );
    }
}
