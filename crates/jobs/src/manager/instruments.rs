//! Which backend plays a sheet: the native instruments take their settings from the score's
//! `backend:` section (instruments.md §1.1, §3); every other instrument is its profile.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use mozart_backends::{
    AnthropicApiBackend, AnthropicApiOptions, Backend, ClaudeCliBackend, ClaudeCliOptions,
    ClaudeOutputFormat, InstrumentRegistry, OllamaBackend, OllamaOptions,
};
use mozart_config::model::OutputFormat;
use mozart_config::{JobConfig, PlanOutline};

use super::table::{Fact, RunChange};
use super::{JobRun, Shared};

/// Whether this conductor can play `instrument` (a profile name: `instruments:` aliases are
/// followed before). The one test of both a submission, which refuses a score naming an
/// instrument that fails it, and [`backend_for`], which builds the sheet's backend.
pub(crate) fn is_known(registry: &InstrumentRegistry, instrument: &str) -> bool {
    // `claude_cli` is built from the score's `backend:` section, profile or not.
    instrument == "claude_cli" || registry.get(instrument).is_some()
}

/// Why a submission of `config` (the score file `score`) is refused: the instruments its sheets, their fallbacks or
/// its reviewer would be played with (`outline`'s resolution, the dispatch's) that `registry`
/// does not have — each with the field naming it and the closest known name — and where
/// profiles go. `None` when every one is known.
pub(crate) fn unknown_instruments(
    registry: &InstrumentRegistry,
    profiles_dir: &Path,
    (score, config): (&Path, &JobConfig),
    outline: &PlanOutline,
) -> Option<String> {
    let unknown: Vec<String> = outline
        .instruments(config)
        .into_iter()
        .filter(|name| !is_known(registry, name))
        .collect();
    if unknown.is_empty() {
        return None;
    }
    let known: HashSet<String> = registry.names().into_iter().collect();
    let each: Vec<String> = unknown
        .iter()
        .map(|name| {
            let field = mozart_config::plan::instrument_field(config, name);
            let why = if let Some(def) = config.instruments.get(name) {
                // Fallbacks name profiles only (upstream's rule, docs/scores.md).
                format!(
                    " (an instruments: alias, which a fallback does not follow: name its profile, '{}')",
                    def.profile
                )
            } else if let Some(meant) = mozart_config::validate::close_match(name, &known) {
                format!(" (did you mean '{meant}'?)")
            } else {
                String::new()
            };
            // As the score wrote it, its control characters written out.
            format!("{field}: {}{why}", mozart_config::yaml::control_escaped(name))
        })
        .collect();
    let (what, them) = if unknown.len() == 1 {
        ("Unknown instrument", "that name, so every sheet playing it")
    } else {
        (
            "Unknown instruments",
            "those names, so every sheet playing one",
        )
    };
    Some(format!(
        "{what} in {}: {}. This conductor has no profile of {them} would fail. \
         Correct the score, or put the profile in {} and restart the conductor (mozart restart); \
         'mozart instruments list' lists the instruments there are",
        score.display(),
        each.join("; "),
        profiles_dir.display(),
    ))
}

/// The backend for one attempt of `instrument` in `run`.
pub(crate) fn backend_for(
    registry: &InstrumentRegistry,
    run: &JobRun,
    instrument: &str,
) -> Result<Arc<dyn Backend>, String> {
    let b = &run.config.backend;
    let unknown = |e: mozart_backends::BackendError| format!("instrument '{instrument}': {e}");
    if !is_known(registry, instrument) {
        return Err(unknown(mozart_backends::BackendError::UnknownInstrument {
            name: instrument.to_string(),
        }));
    }
    match instrument {
        "claude_cli" => {
            let profile_model = registry
                .get(instrument)
                .and_then(|p| p.default_model.clone());
            let options = ClaudeCliOptions {
                skip_permissions: b.skip_permissions,
                disable_mcp: b.disable_mcp,
                output_format: match b.output_format {
                    OutputFormat::Json => ClaudeOutputFormat::Json,
                    OutputFormat::Text => ClaudeOutputFormat::Text,
                    OutputFormat::StreamJson => ClaudeOutputFormat::StreamJson,
                },
                cli_model: b.cli_model.clone().or(profile_model),
                allowed_tools: b.allowed_tools.clone(),
                // A relative prompt file belongs to the score, not to the conductor.
                system_prompt_file: b.system_prompt_file.as_ref().map(|p| {
                    if p.is_absolute() {
                        p.clone()
                    } else {
                        run.score_dir.join(p)
                    }
                }),
                cli_extra_args: b.cli_extra_args.clone(),
                ..ClaudeCliOptions::default()
            };
            Ok(Arc::new(ClaudeCliBackend::new(options)))
        }
        "anthropic_api" => {
            let profile = registry
                .get(instrument)
                .ok_or_else(|| format!("instrument '{instrument}' is not registered"))?;
            let mut options = AnthropicApiOptions::from_profile(profile);
            options.api_key_env = b.api_key_env.clone();
            options.model = b.model.clone();
            options.max_tokens = u64::try_from(b.max_tokens.max(1)).unwrap_or(1);
            options.temperature = b.temperature;
            Ok(Arc::new(AnthropicApiBackend::new(options)))
        }
        "ollama" => {
            let profile = registry
                .get(instrument)
                .ok_or_else(|| format!("instrument '{instrument}' is not registered"))?;
            let mut options = OllamaOptions::from_profile(profile);
            options.base_url = b.ollama.base_url.clone();
            options.model = b.ollama.model.clone();
            options.num_ctx = u64::try_from(b.ollama.num_ctx.max(1)).unwrap_or(4096);
            Ok(Arc::new(OllamaBackend::new(options)))
        }
        other => registry.backend(other).map_err(unknown),
    }
}

/// The backend for `instrument`: the job's own, or built now (building compiles the
/// profile's error patterns) and handed to the table for the job's later attempts.
pub(crate) fn backend(
    shared: &Shared,
    run: &JobRun,
    built: &HashMap<String, Arc<dyn mozart_backends::Backend>>,
    instrument: &str,
) -> Result<Arc<dyn mozart_backends::Backend>, String> {
    if let Some(b) = built.get(instrument) {
        return Ok(Arc::clone(b));
    }
    let b = backend_for(&shared.instruments, run, instrument)?;
    shared.table.tell(Fact::Run {
        job_id: run.job_id.clone(),
        change: RunChange::BackendBuilt {
            instrument: instrument.to_string(),
            backend: Arc::clone(&b),
        },
    });
    Ok(b)
}
