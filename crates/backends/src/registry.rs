//! Loading instrument profiles and building backends for them (instruments.md §4.2).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::claude::{ClaudeCliBackend, ClaudeCliOptions, ClaudeOutputFormat};
use crate::cli_backend::ProfileBackend;
use crate::error::BackendError;
use crate::http::{
    AnthropicApiBackend, AnthropicApiOptions, OllamaBackend, OllamaOptions, OpenAiChatBackend,
    OpenAiChatOptions,
};
use crate::profile::{InstrumentKind, InstrumentProfile, SchemaFamily};
use crate::request::Backend;

/// Native profiles, lowest precedence (instruments.md §4.4).
const NATIVE: &[(&str, &str)] = &[
    (
        "claude_cli",
        include_str!("../profiles/native/claude_cli.yaml"),
    ),
    (
        "anthropic_api",
        include_str!("../profiles/native/anthropic_api.yaml"),
    ),
    ("ollama", include_str!("../profiles/native/ollama.yaml")),
    (
        "recursive_light",
        include_str!("../profiles/native/recursive_light.yaml"),
    ),
];

/// Built-in YAML profiles (instruments.md §4.5, plus `shell`, which runs a prompt's
/// `RUN:` lines so scores work without an AI CLI).
const BUILT_IN: &[(&str, &str)] = &[
    ("aider", include_str!("../profiles/aider.yaml")),
    ("claude-code", include_str!("../profiles/claude-code.yaml")),
    ("cline-cli", include_str!("../profiles/cline-cli.yaml")),
    ("codex-cli", include_str!("../profiles/codex-cli.yaml")),
    ("gemini-cli", include_str!("../profiles/gemini-cli.yaml")),
    ("goose", include_str!("../profiles/goose.yaml")),
    ("shell", include_str!("../profiles/shell.yaml")),
];

/// Where a loaded profile came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileSource {
    /// A native backend (`claude_cli`, `anthropic_api`, `ollama`, `recursive_light`).
    Native,
    /// Embedded in Mozart.
    BuiltIn,
    /// A user file (`$MOZART_HOME/instruments/` or `./.mozart/instruments/`).
    File(PathBuf),
}

/// All known instrument profiles, by name.
#[derive(Debug, Clone, Default)]
pub struct InstrumentRegistry {
    profiles: BTreeMap<String, (Arc<InstrumentProfile>, ProfileSource)>,
    warnings: Vec<String>,
}

impl InstrumentRegistry {
    /// Native + built-in profiles only.
    pub fn builtin() -> Result<Self, BackendError> {
        let mut reg = InstrumentRegistry::default();
        for (src, list) in [
            (ProfileSource::Native, NATIVE),
            (ProfileSource::BuiltIn, BUILT_IN),
        ] {
            for (name, text) in list {
                let profile =
                    InstrumentProfile::from_builtin_yaml(text, &format!("built-in {name}"))?;
                reg.register(profile, src.clone());
            }
        }
        Ok(reg)
    }

    /// Load native and built-in profiles, then `mozart_home/instruments/*.yaml`, then
    /// `project_dir/.mozart/instruments/*.yaml`; later sources win by name. Bad user files
    /// are skipped and reported in [`warnings`](Self::warnings), as upstream logs them.
    ///
    /// A directory of profiles that is another user's (not yours, not root's), or that every
    /// other user may write, is not read at all — a profile names a program run as you —
    /// and a warning names it, why, and what to do (docs/security.md, "Files"); so is each
    /// such file.
    pub fn load(mozart_home: &Path, project_dir: Option<&Path>) -> Result<Self, BackendError> {
        let mut reg = Self::builtin()?;
        let home_dir = mozart_home.join("instruments");
        reg.load_trusted_dir(
            &home_dir,
            "make them yours, or remove them, before Mozart reads them",
        );
        if let Some(project) = project_dir {
            let before = reg.warnings.len();
            reg.load_trusted_dir(
                &project.join(".mozart").join("instruments"),
                &format!(
                    "read them, and copy the ones you trust into {}/",
                    home_dir.display()
                ),
            );
            // The conductor does not read this directory: restarting it would not load the
            // profile there, whatever is fixed.
            let fix = format!(
                "Correct the profile (docs/instruments.md describes its fields) and check it with 'mozart instruments list'; the conductor does not read ./.mozart/instruments/ (it plays a built-in of that name, or refuses the score): to have it play the profile, move it to {}/ and run 'mozart restart'",
                home_dir.display()
            );
            for warning in &mut reg.warnings[before..] {
                *warning = warning.replace(crate::profile::FIX, &fix);
            }
        }
        Ok(reg)
    }

    /// [`load_dir`](Self::load_dir), when `dir` may be read (see [`load`](Self::load)); else
    /// a warning with `fix`.
    fn load_trusted_dir(&mut self, dir: &Path, fix: &str) {
        match mozart_config::profile_trust::untrusted_profile_dir(dir) {
            None => self.load_dir(dir),
            Some(why) => self.warnings.push(format!(
                "instrument profiles in {} are not loaded: {why} — a profile names a program Mozart runs as you, so only your own or root's are read; {fix}",
                dir.display()
            )),
        }
    }

    /// Load every `*.yaml` / `*.yml` in `dir` (non-recursive, sorted by file name).
    pub fn load_dir(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
            })
            .collect();
        files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
        for path in files {
            // Not logged here: the caller shows each warning once, in its own way (the CLI
            // as `Warning: …`, the conductor in its log).
            match Self::load_file_noting(&path) {
                Ok((profile, duplicates)) => {
                    // Loaded, last value winning, as a score's and conductor.yaml's are.
                    self.warnings.extend(duplicates.iter().map(|d| {
                        format!("instrument profile {}: {}", path.display(), d.warning())
                    }));
                    // Two files of one directory naming the same instrument: the later one
                    // (by file name) is used — said, since only one of them can be meant.
                    // (A profile replacing a built-in, or one in the project's directory
                    // replacing the home's, is the documented override.)
                    if let Some((_, ProfileSource::File(earlier))) =
                        self.profiles.get(&profile.name)
                    {
                        if earlier.parent() == path.parent() {
                            self.warnings.push(format!(
                                "instrument profiles {} and {} both name the instrument '{}': {} is used (rename one, or remove the other)",
                                earlier.display(),
                                path.display(),
                                profile.name,
                                path.display()
                            ));
                        }
                    }
                    self.register(profile, ProfileSource::File(path));
                }
                Err(err) => self.warnings.push(err.to_string()),
            }
        }
    }

    /// Read and validate one profile file.
    pub fn load_file(path: &Path) -> Result<InstrumentProfile, BackendError> {
        Self::load_file_noting(path).map(|(profile, _)| profile)
    }

    /// [`load_file`](Self::load_file), with the keys the file gives twice in one mapping.
    fn load_file_noting(
        path: &Path,
    ) -> Result<(InstrumentProfile, Vec<mozart_yaml::DuplicateKey>), BackendError> {
        use mozart_config::profile_trust::{read_profile_file, ProfileFileError};
        let text = read_profile_file(path).map_err(|e| match e {
            ProfileFileError::Read { path, source } => BackendError::ReadProfile { path, source },
            e @ ProfileFileError::Untrusted { .. } => BackendError::UntrustedProfile(e),
        })?;
        let profile = InstrumentProfile::from_yaml(&text, &path.display().to_string())?;
        // A second parse of a file of a few lines, made only for a user's own profile.
        Ok((profile, mozart_yaml::duplicate_keys(&text)))
    }

    /// Add or replace a profile.
    pub fn register(&mut self, profile: InstrumentProfile, source: ProfileSource) {
        self.profiles
            .insert(profile.name.clone(), (Arc::new(profile), source));
    }

    /// The profile with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<InstrumentProfile>> {
        self.profiles.get(name).map(|(p, _)| p)
    }

    /// Where the profile came from.
    pub fn source(&self, name: &str) -> Option<&ProfileSource> {
        self.profiles.get(name).map(|(_, s)| s)
    }

    /// All names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.profiles.keys().cloned().collect()
    }

    /// All profiles, sorted by name.
    pub fn profiles(&self) -> impl Iterator<Item = &Arc<InstrumentProfile>> {
        self.profiles.values().map(|(p, _)| p)
    }

    /// Problems with user profile files that were skipped.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// A backend that runs the named instrument.
    ///
    /// `claude_cli` runs through [`ClaudeCliBackend`] in JSON mode (the conductor builds its
    /// own with [`ClaudeCliBackend::new`] to apply a score's `backend:` section); other CLI
    /// profiles through [`ProfileBackend`]; `http` profiles through the HTTP backends
    /// (`anthropic_api`, `ollama` and user profiles of those families).
    pub fn backend(&self, name: &str) -> Result<Arc<dyn Backend>, BackendError> {
        let profile = self
            .get(name)
            .ok_or_else(|| BackendError::UnknownInstrument {
                name: name.to_string(),
            })?;
        match profile.kind {
            InstrumentKind::Cli if name == "claude_cli" => {
                let options = ClaudeCliOptions {
                    output_format: ClaudeOutputFormat::Json,
                    cli_model: profile.default_model.clone(),
                    ..ClaudeCliOptions::default()
                };
                Ok(Arc::new(ClaudeCliBackend::new(options)))
            }
            InstrumentKind::Cli => Ok(Arc::new(ProfileBackend::new(Arc::clone(profile))?)),
            InstrumentKind::Http => http_backend(profile),
        }
    }
}

/// The HTTP backend for an `http` profile: the Anthropic family through
/// [`AnthropicApiBackend`], Ollama's `/api/chat` / `/api/generate` through
/// [`OllamaBackend`], OpenAI-compatible chat completions through [`OpenAiChatBackend`];
/// other APIs (Gemini, recursive_light's `/process`) are refused by name
/// (instruments.md §4.7.5).
fn http_backend(profile: &InstrumentProfile) -> Result<Arc<dyn Backend>, BackendError> {
    let name = &profile.name;
    let Some(http) = &profile.http else {
        return Err(BackendError::InvalidProfile {
            origin: format!("instrument '{name}'"),
            message: "kind 'http' requires an 'http' section".into(),
        });
    };
    let endpoint = http.endpoint.trim_end_matches('/');
    if http.schema_family == SchemaFamily::Anthropic {
        return Ok(Arc::new(AnthropicApiBackend::new(
            AnthropicApiOptions::from_profile(profile),
        )));
    }
    if endpoint.ends_with("/api/chat") || endpoint.ends_with("/api/generate") {
        return Ok(Arc::new(OllamaBackend::new(OllamaOptions::from_profile(
            profile,
        ))));
    }
    if http.schema_family == SchemaFamily::Openai && endpoint.ends_with("/chat/completions") {
        return Ok(Arc::new(OpenAiChatBackend::new(
            OpenAiChatOptions::from_profile(profile),
        )));
    }
    Err(BackendError::Unsupported {
        backend: name.clone(),
        reason: format!(
            "HTTP instrument '{name}' (schema_family '{}', endpoint '{}') is not supported; \
             HTTP instruments must use schema_family 'anthropic', an Ollama endpoint \
             (/api/chat, /api/generate) or OpenAI chat completions (…/chat/completions)",
            schema_family_name(http.schema_family),
            http.endpoint
        ),
    })
}

fn schema_family_name(family: SchemaFamily) -> &'static str {
    match family {
        SchemaFamily::Openai => "openai",
        SchemaFamily::Anthropic => "anthropic",
        SchemaFamily::Gemini => "gemini",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Two files of one directory naming the same instrument: the later one (by file name)
    /// is used, and a warning names both (it was silent: the shadow ran).
    #[test]
    fn two_files_naming_one_instrument_are_said() {
        let dir = tempfile::tempdir().unwrap();
        let profile = |name: &str, exe: &str| {
            format!("name: {name}\ndisplay_name: {exe}\nkind: cli\ncli:\n  command:\n    executable: {exe}\n")
        };
        std::fs::write(dir.path().join("jc.yaml"), profile("jc", "real")).unwrap();
        std::fs::write(dir.path().join("zz-shadow.yaml"), profile("jc", "shadow")).unwrap();
        let mut reg = InstrumentRegistry::builtin().unwrap();
        reg.load_dir(dir.path());
        assert_eq!(reg.get("jc").unwrap().display_name, "shadow");
        let warned = reg.warnings().join("\n");
        assert!(
            warned.contains("jc.yaml")
                && warned.contains("zz-shadow.yaml")
                && warned.contains("'jc'"),
            "{warned}"
        );
    }

    #[test]
    fn built_in_error_patterns_parse() {
        // `builtin` skips the pattern check a user's profile gets: it is made here, once
        // for every profile built into the binary.
        for (name, text) in NATIVE.iter().chain(BUILT_IN) {
            InstrumentProfile::from_yaml(text, name)
                .unwrap_or_else(|e| panic!("built-in profile {name}: {e}"));
        }
        let reg = InstrumentRegistry::builtin().unwrap();
        assert_eq!(reg.names().len(), NATIVE.len() + BUILT_IN.len());
    }

    #[test]
    fn builtins_load_with_upstream_names() {
        let reg = InstrumentRegistry::builtin().unwrap();
        let names = reg.names();
        for n in [
            "aider",
            "anthropic_api",
            "claude-code",
            "claude_cli",
            "cline-cli",
            "codex-cli",
            "gemini-cli",
            "goose",
            "ollama",
            "recursive_light",
        ] {
            assert!(names.contains(&n.to_string()), "{n} missing");
        }
        assert_eq!(
            reg.get("gemini-cli").unwrap().default_model.as_deref(),
            Some("gemini-2.5-pro")
        );
        assert_eq!(reg.backend("ollama").unwrap().name(), "Ollama");
        assert_eq!(
            reg.backend("anthropic_api").unwrap().name(),
            "Anthropic API"
        );
        let err = reg.backend("recursive_light").err().unwrap().to_string();
        assert!(
            err.contains("recursive_light") && err.contains("/process"),
            "{err}"
        );
        assert!(matches!(
            reg.backend("nope"),
            Err(BackendError::UnknownInstrument { .. })
        ));
        assert_eq!(reg.backend("claude-code").unwrap().name(), "Claude Code");
    }

    /// The built-in CLI profiles' status-code patterns match whole numbers only: Claude
    /// Code's and Gemini CLI's JSON carry UUIDs and durations, and a failed claude-code run
    /// (a malformed stream) whose session id held "429" ("b3942999-…") was taken for a rate
    /// limit and waited out, "Rate limit detected" in status.
    #[test]
    fn builtin_status_code_patterns_do_not_match_inside_ids() {
        let reg = InstrumentRegistry::builtin().unwrap();
        let ids = r#"{"session_id":"b3942999-5b30-422a-baab-aa4e529f0503","duration_ms":14290,"uuid":"0a503e41-1429-4c3b-8529-503aa"}"#;
        for name in ["claude-code", "gemini-cli", "codex-cli"] {
            let profile = reg.get(name).unwrap();
            let cli = profile.cli.as_ref().unwrap();
            let p = crate::profile::ErrorPatterns::compile(name, &cli.errors).unwrap();
            for (kind, re) in [("rate limit", &p.rate_limit), ("capacity", &p.capacity)] {
                if let Some(re) = re {
                    assert!(
                        !re.is_match(ids),
                        "{name}'s {kind} patterns match ids: {re}"
                    );
                }
            }
            if let Some(re) = &p.rate_limit {
                assert!(
                    re.is_match("API Error: 429 Too Many Requests"),
                    "{name}: {re}"
                );
            }
        }
    }

    #[test]
    fn user_dirs_override_in_order_and_bad_files_are_skipped() {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let org = home.path().join("instruments");
        let venue = project.path().join(".mozart/instruments");
        std::fs::create_dir_all(&org).unwrap();
        std::fs::create_dir_all(&venue).unwrap();
        let prof = |display: &str| {
            format!("name: aider\ndisplay_name: {display}\nkind: cli\ncli:\n  command:\n    executable: aider\n")
        };
        std::fs::write(org.join("a.yaml"), prof("Org A")).unwrap();
        std::fs::write(org.join("b.yml"), prof("Org B")).unwrap();
        std::fs::write(org.join("broken.yaml"), "name: [").unwrap();
        std::fs::write(org.join("notes.txt"), prof("ignored")).unwrap();
        let reg = InstrumentRegistry::load(home.path(), None).unwrap();
        assert_eq!(reg.get("aider").unwrap().display_name, "Org B");
        // The broken file, and the two files naming one instrument.
        assert_eq!(reg.warnings().len(), 2, "{:?}", reg.warnings());
        assert!(reg
            .warnings()
            .iter()
            .any(|w| w.contains("both name the instrument 'aider'")));
        std::fs::write(venue.join("z.yaml"), prof("Venue")).unwrap();
        let reg = InstrumentRegistry::load(home.path(), Some(project.path())).unwrap();
        assert_eq!(reg.get("aider").unwrap().display_name, "Venue");
        assert!(matches!(reg.source("aider"), Some(ProfileSource::File(_))));
    }
}
