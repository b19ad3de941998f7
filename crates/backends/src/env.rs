//! Building an instrument's environment (instruments.md §4.3 "Environment").

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::sync::Arc;

use crate::profile::CliCommand;

/// Variables kept when a profile restricts the environment with `required_env`.
pub const SYSTEM_VARS: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TMP",
    "TEMP",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    // Ours: how this machine reaches the network — its proxy and the certificates it trusts.
    // Without them a CLI behind a corporate proxy, or one whose TLS goes through the
    // company's own CA, cannot reach its API at all (docs/differences.md).
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "all_proxy",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Claude Code refuses to start when this is set (claude-code-output.md §8.2); a conductor
/// started from inside a Claude session would otherwise break every Claude instrument.
pub const NESTING_GUARD_VAR: &str = "CLAUDECODE";

/// Expand `$VAR`, `${VAR}` and `${VAR:-default}` (the default when `VAR` is unset or empty)
/// from `vars`; other unknown variables stay verbatim.
pub fn expand_vars(value: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let (name, consumed) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after
                .char_indices()
                .find(|(i, c)| {
                    !(c.is_ascii_alphanumeric() || *c == '_') || (*i == 0 && c.is_ascii_digit())
                })
                .map_or(after.len(), |(i, _)| i);
            (&after[..end], end)
        };
        match (name.is_empty(), vars.get(name), name.split_once(":-")) {
            (false, Some(v), _) => out.push_str(v),
            (false, None, Some((var, default))) => match vars.get(var).filter(|v| !v.is_empty()) {
                Some(v) => out.push_str(v),
                None => out.push_str(default),
            },
            _ => out.push_str(&rest[pos..pos + 1 + consumed]),
        }
        rest = &after[consumed..];
    }
    out.push_str(rest);
    out
}

/// The environment plan for a CLI profile plus the score's env.
pub fn plan_for(command: &CliCommand, score_env: &[(String, String)]) -> EnvPlan {
    let mut plan = EnvPlan {
        remove: vec![NESTING_GUARD_VAR.to_string()],
        ..Default::default()
    };
    // Only a restricted environment or `$VAR` expansion needs the parent's variables.
    if command.required_env.is_none() && command.env.is_empty() {
        plan.set.extend(score_env.iter().cloned());
        return plan;
    }
    let parent: HashMap<String, String> = std::env::vars().collect();
    if let Some(required) = &command.required_env {
        plan.clear = true;
        for key in SYSTEM_VARS
            .iter()
            .copied()
            .chain(required.iter().map(String::as_str))
        {
            if let Some(v) = parent.get(key) {
                plan.set.push((key.to_string(), v.clone()));
            }
        }
    }
    for (key, value) in &command.env {
        plan.set.push((key.clone(), expand_vars(value, &parent)));
    }
    plan.set.extend(score_env.iter().cloned());
    plan
}

/// How the child's environment is built from the conductor's.
#[derive(Debug, Clone, Default)]
pub struct EnvPlan {
    /// Start from an empty environment instead of the parent's.
    pub clear: bool,
    /// Variables to set, in order (later wins).
    pub set: Vec<(String, String)>,
    /// Variables to remove from the inherited environment.
    pub remove: Vec<String>,
}

/// A child's complete environment, worked out before the spawn — once per backend (one job)
/// rather than by std on every spawn, which otherwise copies and merges the conductor's
/// whole environment each time any variable is changed (instruments.md §4.3).
///
/// The conductor's own environment is fixed once it runs (the CLI adjusts it while still
/// single-threaded, before the conductor starts), so resolving a plan early gives the child
/// exactly the variables resolving it at the spawn would.
#[derive(Debug, Clone)]
pub enum ChildEnv {
    /// The conductor's environment, unchanged: nothing to add, and nothing to remove that is
    /// there. The child receives it as it is (in the conductor's order), without a copy.
    Inherit,
    /// Exactly these variables.
    Exact(Arc<[(OsString, OsString)]>),
}

impl ChildEnv {
    /// `plan` applied to the conductor's current environment.
    pub fn resolve(plan: &EnvPlan) -> ChildEnv {
        // The conductor's own variables are known to the redaction already; what the
        // profile and the score add becomes known here, before the child can print it.
        crate::redact::register_env(plan.set.iter().map(|(k, v)| (k, v)));
        let untouched = !plan.clear
            && plan.set.is_empty()
            && plan.remove.iter().all(|k| std::env::var_os(k).is_none());
        if untouched {
            return ChildEnv::Inherit;
        }
        let mut vars: BTreeMap<OsString, OsString> = if plan.clear {
            BTreeMap::new()
        } else {
            std::env::vars_os().collect()
        };
        for key in &plan.remove {
            vars.remove(std::ffi::OsStr::new(key));
        }
        for (key, value) in &plan.set {
            vars.insert(key.into(), value.into());
        }
        ChildEnv::Exact(vars.into_iter().collect())
    }

    /// This environment with `set` applied on top, in order (later wins).
    pub fn with_set(&self, set: &[(String, String)]) -> ChildEnv {
        if set.is_empty() {
            return self.clone();
        }
        crate::redact::register_env(set.iter().map(|(k, v)| (k, v)));
        let mut vars: BTreeMap<OsString, OsString> = match self {
            ChildEnv::Inherit => std::env::vars_os().collect(),
            ChildEnv::Exact(list) => list.iter().cloned().collect(),
        };
        for (key, value) in set {
            vars.insert(key.into(), value.into());
        }
        ChildEnv::Exact(vars.into_iter().collect())
    }

    /// The child's `PATH`, where its program name is looked up.
    pub fn path(&self) -> Option<OsString> {
        match self {
            ChildEnv::Inherit => std::env::var_os("PATH"),
            ChildEnv::Exact(list) => list
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone()),
        }
    }

    /// The variables the child gets, as `(name, value)` pairs.
    pub fn vars(&self) -> Vec<(OsString, OsString)> {
        match self {
            ChildEnv::Inherit => std::env::vars_os().collect(),
            ChildEnv::Exact(list) => list.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_keeps_unknown_and_lone_dollars() {
        let vars: HashMap<String, String> = [("HOME".to_string(), "/h".to_string())].into();
        assert_eq!(expand_vars("$HOME/x:${HOME}", &vars), "/h/x:/h");
        assert_eq!(
            expand_vars("$NOPE ${NOPE} $ 5$", &vars),
            "$NOPE ${NOPE} $ 5$"
        );
        assert_eq!(expand_vars("${HOME", &vars), "${HOME");
    }

    #[test]
    fn a_default_applies_when_the_variable_is_unset_or_empty() {
        let vars: HashMap<String, String> = [
            ("SET".to_string(), "5".to_string()),
            ("EMPTY".to_string(), String::new()),
        ]
        .into();
        assert_eq!(expand_vars("${SET:-2}", &vars), "5");
        assert_eq!(expand_vars("${UNSET:-2}", &vars), "2");
        assert_eq!(expand_vars("${EMPTY:-2}", &vars), "2");
    }
}
