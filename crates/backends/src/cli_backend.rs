//! The generic command instrument: any `kind: cli` profile (instruments.md §4.3).
//!
//! Differences from upstream's `PluginCliBackend`, all deliberate: the child runs in its
//! own process group and timeout / cancel kill the whole group (§4.7.2); output is captured
//! with bounded memory; a rate-limit pattern in a *successful* run counts only when the
//! answer is short (an answer that quotes "429" is not a limit, §4.7.1); completion-event
//! filter keys are dot-paths (fixes codex-cli's never-matching filter).

use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use serde_json::Value;

use crate::env::{ChildEnv, EnvPlan};
use crate::error::BackendError;
use crate::json_path::{resolve, resolve_all, to_text};
use crate::live::{judge, retry_notice, retry_progress, Judgement, Verdict, Watch};
use crate::process::{resolve_program, which, LineSink, ProcessOutcome, ProcessSpec};
use crate::profile::{CliOutputConfig, ErrorPatterns, InstrumentProfile, OutputFormat};
use crate::redact::redact_owned;
use crate::request::{Backend, ExecutionRequest};
use crate::types::{BoxFuture, ExecutionResult, ExitReason, FailureKind, HealthStatus};

/// Largest stdout kept whole for `format: json` parsing; a longer document falls back to the
/// raw tail. Parsing holds a document about four times over (raw bytes, parsed value, the
/// extracted answer, its redacted copy), so 4 MiB keeps the conductor under issue 4's bar of
/// 20 MB however much an instrument prints (it was 64 MiB: 64 MB of RSS for a 100 MB answer,
/// docs/performance.md "Instruments (issue 4)"). AI CLIs' JSON answers are far smaller.
pub const JSON_DOCUMENT_LIMIT: usize = 4 * 1024 * 1024;

/// A successful run's answer longer than this that mentions a rate limit is an answer.
pub const RATE_LIMIT_ANSWER_MAX_CHARS: usize = 300;

/// Runs a CLI instrument described by a profile.
#[derive(Debug)]
pub struct ProfileBackend {
    profile: Arc<InstrumentProfile>,
    patterns: ErrorPatterns,
    /// The child environment and program path every spawn of this backend shares (one
    /// job's), worked out on first use.
    spawn: OnceLock<SpawnBase>,
}

/// What the spawns of one backend have in common.
#[derive(Debug)]
pub(crate) struct SpawnBase {
    /// The profile's environment (instruments.md §4.3) without the request's own variables.
    env: ChildEnv,
    /// The program found on the child's `PATH`; kept once found (looked for again until then).
    program: Mutex<Option<PathBuf>>,
}

impl SpawnBase {
    pub(crate) fn new(plan: &EnvPlan) -> Self {
        SpawnBase {
            env: ChildEnv::resolve(plan),
            program: Mutex::new(None),
        }
    }

    /// Environment and program path for one spawn of `program` with the request's `extra`
    /// variables applied last.
    pub(crate) fn prepare(&self, spec: &mut ProcessSpec, extra: &[(String, String)]) {
        let env = self.env.with_set(extra);
        spec.program_path = if extra.iter().any(|(k, _)| k == "PATH") {
            resolve_program(&spec.program, &env)
        } else {
            let mut cached = self.program.lock().unwrap_or_else(|p| p.into_inner());
            if cached.is_none() {
                *cached = resolve_program(&spec.program, &env);
            }
            cached.clone()
        };
        spec.child_env = Some(env);
    }
}

impl ProfileBackend {
    /// A backend for a `kind: cli` profile.
    pub fn new(profile: Arc<InstrumentProfile>) -> Result<Self, BackendError> {
        let cli = profile
            .cli
            .as_ref()
            .ok_or_else(|| BackendError::Unsupported {
                backend: profile.name.clone(),
                reason: "profile has no 'cli' section".into(),
            })?;
        let patterns = ErrorPatterns::compile(&profile.name, &cli.errors)?;
        Ok(ProfileBackend {
            profile,
            patterns,
            spawn: OnceLock::new(),
        })
    }

    /// The profile this backend runs.
    pub fn profile(&self) -> &InstrumentProfile {
        &self.profile
    }

    /// The argument vector after the executable, in upstream's order (§4.3).
    pub fn build_args(&self, req: &ExecutionRequest, model: Option<&str>) -> Vec<String> {
        let Some(cli) = &self.profile.cli else {
            return Vec::new();
        };
        let c = &cli.command;
        let mut args = Vec::new();
        args.extend(c.subcommand.clone());
        args.extend(c.auto_approve_flag.clone());
        if let Some(flag) = &c.output_format_flag {
            args.push(flag.clone());
            args.extend(c.output_format_value.clone());
        }
        if let (Some(flag), Some(model)) = (&c.model_flag, model) {
            args.push(flag.clone());
            args.push(model.to_string());
        }
        if let Some(flag) = &c.timeout_flag {
            args.push(flag.clone());
            args.push(req.timeout.as_secs().to_string());
        }
        if let Some(flag) = &c.working_dir_flag {
            args.push(flag.clone());
            args.push(req.working_dir.display().to_string());
        }
        match &c.prompt_stdin_args {
            // The prompt goes to stdin (`run`): it stays off the command line.
            Some(stdin_args) => args.extend(stdin_args.iter().cloned()),
            None => {
                args.extend(c.prompt_flag.clone());
                args.push(req.prompt.clone());
            }
        }
        args.extend(c.mcp_disable_args.iter().cloned());
        args.extend(c.extra_flags.iter().cloned());
        args
    }

    fn model_for(&self, req: &ExecutionRequest) -> Option<String> {
        for key in req.options.keys() {
            // `timeout_seconds` became the sheet's timeout when the plan was made.
            if key != "model" && key != "timeout_seconds" {
                tracing::warn!(instrument = %self.profile.name, option = %key, job = %req.job_id, sheet = req.sheet_num,
                    "instrument_config option is not used by CLI instruments; ignoring it");
            }
        }
        req.model
            .clone()
            .or_else(|| {
                req.options
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .or_else(|| self.profile.default_model.clone())
    }

    async fn run(&self, req: ExecutionRequest) -> ExecutionResult {
        let Some(cli) = &self.profile.cli else {
            return ExecutionResult::start_failure(
                None,
                FailureKind::Configuration,
                format!("instrument '{}' has no cli section", self.profile.name),
            );
        };
        let model = self.model_for(&req);
        let mut spec = ProcessSpec::new(
            cli.command.executable.clone(),
            self.build_args(&req, model.as_deref()),
            req.timeout,
        );
        spec.cwd = Some(req.working_dir.clone());
        // The score's variables come last (plan_for's order), so the profile's part of the
        // environment is the same for every request.
        self.spawn
            .get_or_init(|| SpawnBase::new(&crate::env::plan_for(&cli.command, &[])))
            .prepare(&mut spec, &req.env);
        if cli.command.prompt_stdin_args.is_some() {
            spec.stdin = Some(req.prompt.clone().into_bytes());
        }
        spec.kill_grace = req.kill_grace;
        spec.owner = (!req.job_id.is_empty()).then(|| req.job_id.clone());
        spec.log_base = req.output_log_base.clone();
        spec.log_unavailable = req.output_log_unavailable.clone();
        let jsonl = Arc::new(Mutex::new(JsonlState::default()));
        // The CLI's retry announcements, on stderr (Gemini CLI) or as JSONL error events
        // (Codex): a refused key or a rate limit stops it (crate::live).
        let watch = Watch::new();
        let retries = RetryWatch {
            watch: Arc::clone(&watch),
            patterns: self.patterns.clone(),
            progress: Arc::clone(&req.progress),
        };
        spec.stop = Some(watch.stop_signal());
        let on_stderr = retries.clone();
        spec.stderr_lines = Some(crate::process::LineHook(Arc::new(move |line: &[u8]| {
            on_stderr.line(&String::from_utf8_lossy(line));
        })));
        let sink: Option<Box<dyn LineSink>> = match cli.output.format {
            OutputFormat::Json => {
                spec.keep_full_stdout = JSON_DOCUMENT_LIMIT;
                None
            }
            OutputFormat::Jsonl => Some(Box::new(JsonlSink {
                config: cli.output.clone(),
                state: Arc::clone(&jsonl),
                progress: Arc::clone(&req.progress),
                retries,
            })),
            OutputFormat::Text => None,
        };
        let (outcome, _) = crate::placement::run(&req.placement, &req.placed(), spec, sink).await;
        let jsonl = std::mem::take(&mut *jsonl.lock().unwrap_or_else(|p| p.into_inner()));
        let verdict = watch.verdict().filter(|_| outcome.stopped);
        self.parse(&req, outcome, jsonl, model, verdict)
    }

    fn parse(
        &self,
        req: &ExecutionRequest,
        outcome: ProcessOutcome,
        jsonl: JsonlState,
        model: Option<String>,
        verdict: Option<Verdict>,
    ) -> ExecutionResult {
        let Some(cli) = &self.profile.cli else {
            return ExecutionResult::default();
        };
        if let Some(err) = &outcome.spawn_error {
            let exe = &cli.command.executable;
            let mut r = spawn_failure(err, format!("Executable not found: {exe}"), "process");
            r.model = model;
            r.duration_seconds = outcome.duration.as_secs_f64();
            return r;
        }
        let stdout = outcome.stdout.tail_string();
        let stderr = outcome.stderr.tail_string();
        let exited_ok = !outcome.timed_out
            && outcome
                .exit_code
                .is_some_and(|c| cli.errors.success_exit_codes.contains(&c));
        let mut result = base_result(&outcome);
        result.model = model;
        // The outcome: what the CLI printed, read once.
        let no_answer = self.read_output(&outcome, jsonl, exited_ok, &stdout, &mut result);
        self.price(&mut result);
        if let Some(verdict) = verdict {
            return self.stopped(result, verdict, stdout, stderr);
        }
        // The verdict, decided here only.
        let end = RunEnd::of(&outcome, exited_ok, no_answer);
        let success = matches!(end, RunEnd::Succeeded);
        let combined = self.pattern_text(&stdout, &stderr);
        if let Some(re) = &self.patterns.rate_limit {
            let answer_len = result
                .result_text
                .as_deref()
                .unwrap_or(&stdout)
                .trim()
                .chars()
                .count();
            result.rate_limited =
                re.is_match(&combined) && (!success || answer_len <= RATE_LIMIT_ANSWER_MAX_CHARS);
        }
        result.error_type = self.failure_kind(&outcome, success, result.rate_limited, &combined);
        if let (Some(code), true) = (outcome.exit_code, success) {
            // A success code other than 0 is reported as 0 (instruments.md §4.3).
            if code != 0 {
                result.exit_code = Some(0);
            }
        }
        // The message, last: the timeout's, the error the CLI reported (read with its
        // output), else worded from how the run ended.
        note_abnormal_end(
            &mut result,
            outcome.timed_out,
            outcome.exit_signal,
            req.timeout,
        );
        if result.error_message.is_none() {
            result.error_message = self.end_message(&end, &stdout, &stderr);
        }
        result.success = success;
        result.stdout = redact_owned(stdout);
        result.stderr = redact_owned(stderr);
        result.result_text = result.result_text.map(redact_owned);
        // The hint whenever the sheet will fail as auth: also when no profile pattern named
        // the failure but Mozart's own classification (what the sheet's error category is
        // made from, the CLI's JSON error first) finds a refused key — a user's profile
        // without `auth_error_patterns`, or a CLI that gave up by itself before the live
        // stop (a race the Gemini test hit under load: auth, with no word of which key).
        if !success
            && (result.error_type == Some(FailureKind::Auth)
                || crate::classify::classify(&result).category
                    == crate::classify::ErrorCategory::Auth)
        {
            self.add_key_hint(&mut result);
        }
        result.error_message = result.error_message.map(redact_owned);
        result
    }

    /// The message of a run that ended as `end`, when it did not succeed (a timeout's is
    /// [`note_abnormal_end`]'s).
    fn end_message(&self, end: &RunEnd, stdout: &str, stderr: &str) -> Option<String> {
        let name = &self.profile.display_name;
        match end {
            RunEnd::Succeeded | RunEnd::TimedOut => None,
            RunEnd::NoAnswer(missing) => Some(missing.message(name)),
            // With the line that says why (issue 22: "exit code 1" alone did not).
            RunEnd::Exited(code) => Some(match crate::classify::cause_line(stdout, stderr) {
                Some(line) => format!("{name} exited with code {code}: {line}"),
                None => format!("{name} exited with code {code}"),
            }),
            RunEnd::Killed => Some(format!("{name} was killed by a signal")),
        }
    }

    /// Read what the CLI printed in its profile's format (answer, tokens, cost, the error
    /// it reported) into `result`; for a run that exited as success, why it has no answer.
    fn read_output(
        &self,
        outcome: &ProcessOutcome,
        jsonl: JsonlState,
        exited_ok: bool,
        stdout: &str,
        result: &mut ExecutionResult,
    ) -> Option<NoAnswer> {
        let cli = self.profile.cli.as_ref()?;
        match cli.output.format {
            OutputFormat::Text => None,
            OutputFormat::Json => {
                let doc = self.parse_json_document(outcome, exited_ok, result);
                exited_ok.then_some(doc).and_then(JsonDoc::missing)
            }
            OutputFormat::Jsonl => {
                result.input_tokens = jsonl.input_tokens;
                result.output_tokens = jsonl.output_tokens;
                // The CLI's own figure: exact, not priced from the tokens (`price`).
                if let Some(cost) = jsonl.cost_usd {
                    result.cost_usd = Some(cost);
                    result.cost_confidence = Some(crate::types::COST_EXACT);
                }
                if !exited_ok {
                    if let Some(err) = &jsonl.error_message {
                        result.error_message =
                            Some(format!("{} failed: {err}", self.profile.display_name));
                        result.api_error_status = api_status_in(err);
                    }
                    return None;
                }
                result.result_text = jsonl.result_text;
                // A line too long to parse (bounded memory) may have been the completion
                // event: no verdict without seeing it.
                let kind = cli.output.completion_event_type.as_ref()?;
                if jsonl.completion_seen || outcome.stdout.lines_dropped() {
                    return None;
                }
                Some(match (jsonl.error_message, jsonl.events) {
                    (Some(err), _) => NoAnswer::Error(err),
                    (None, 0) if stdout.trim().is_empty() => NoAnswer::Empty,
                    (None, 0) => NoAnswer::NoJsonLines(head(stdout)),
                    (None, _) => NoAnswer::NoCompletion(kind.clone()),
                })
            }
        }
    }

    /// Both streams together, for the profile's error patterns (empty without any).
    fn pattern_text(&self, stdout: &str, stderr: &str) -> String {
        let p = &self.patterns;
        let any_pattern = [
            &p.rate_limit,
            &p.auth,
            &p.crash,
            &p.stale,
            &p.timeout,
            &p.capacity,
        ]
        .iter()
        .any(|p| p.is_some());
        if any_pattern {
            format!("{stdout}\n{stderr}")
        } else {
            String::new()
        }
    }

    /// The kind of a failed run: a timeout, a rate limit, the first of the profile's
    /// patterns that matches, or "no result" for an exit 0 without an answer.
    fn failure_kind(
        &self,
        outcome: &ProcessOutcome,
        success: bool,
        rate_limited: bool,
        combined: &str,
    ) -> Option<FailureKind> {
        if outcome.timed_out {
            return Some(FailureKind::Timeout);
        }
        if success {
            return None;
        }
        if rate_limited {
            return Some(FailureKind::RateLimit);
        }
        let p = &self.patterns;
        let tagged = [
            (&p.auth, FailureKind::Auth),
            (&p.crash, FailureKind::Crash),
            (&p.stale, FailureKind::Stale),
            (&p.timeout, FailureKind::Timeout),
            (&p.capacity, FailureKind::Capacity),
        ];
        tagged
            .iter()
            .find(|(re, _)| re.as_ref().is_some_and(|re| re.is_match(combined)))
            .map(|(_, kind)| *kind)
            .or((outcome.exit_code == Some(0)).then_some(FailureKind::NoResult))
    }

    /// Price the attempt from the profile's models when the CLI reported its tokens but no
    /// cost (Gemini CLI, Codex; issue 22): exact when the model that ran is listed, else an
    /// estimate at the profile's pricing model (or the fallback price) with a lower
    /// confidence. Without both token counts the cost stays unknown (`None`).
    fn price(&self, result: &mut ExecutionResult) {
        if result.cost_usd.is_some() {
            return;
        }
        let (Some(input), Some(output)) = (result.input_tokens, result.output_tokens) else {
            return;
        };
        let model = result.model.as_deref().unwrap_or_default();
        let listed = self.profile.models.iter().any(|m| m.name == model);
        result.cost_usd = Some(crate::http::price_usd(
            &self.profile.models,
            self.profile.default_model.as_deref(),
            model,
            input,
            output,
        ));
        result.cost_confidence = Some(if listed {
            crate::types::COST_EXACT
        } else {
            crate::types::COST_ESTIMATED
        });
    }

    /// Name the credentials the profile passes on after an auth failure's message, so the
    /// fix is obvious: those of them the conductor's environment sets (the key that was
    /// refused), or, when it sets none, all of them. Listing all six of `claude-code`'s
    /// (AWS ones included) made the message too long for `mozart errors` to show the CLI's
    /// own words.
    fn add_key_hint(&self, result: &mut ExecutionResult) {
        let (keys, set) = self.profile.key_vars();
        let end = crate::classify::KEY_HINT_END;
        let hint = match (keys.is_empty(), set.is_empty()) {
            (true, _) => {
                format!("check the instrument's credentials in the conductor's environment, {end}")
            }
            (false, false) => format!(
                "check {} in the conductor's environment, {end}",
                set.join(" / ")
            ),
            (false, true) => format!(
                "none of {} is set in the conductor's environment: set one, {end}",
                keys.join(" / ")
            ),
        };
        let msg = result.error_message.take().unwrap_or_default();
        result.error_message = Some(format!("{msg}. Authentication failed: {hint}"));
    }

    /// The result of a run the conductor stopped on `verdict`, from the CLI's retry line.
    fn stopped(
        &self,
        mut result: ExecutionResult,
        verdict: Verdict,
        stdout: String,
        stderr: String,
    ) -> ExecutionResult {
        let name = &self.profile.display_name;
        result.exit_code = None;
        result.exit_signal = None;
        result.result_text = None;
        verdict.mark(&mut result);
        match verdict {
            Verdict::Auth { status, said } => {
                let status = status.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
                result.error_message = Some(format!(
                    "{name} was stopped at its first retry: the API refused the \
                     credentials{status}, and retrying cannot help: {said}"
                ));
                self.add_key_hint(&mut result);
            }
            Verdict::RateLimit { said, .. } => {
                result.error_message = Some(format!(
                    "{name} was stopped at its first retry: rate limited: {said}"
                ));
            }
        }
        result.stdout = redact_owned(stdout);
        result.stderr = redact_owned(stderr);
        result.error_message = result.error_message.map(redact_owned);
        result
    }

    fn parse_json_document(
        &self,
        outcome: &ProcessOutcome,
        success: bool,
        result: &mut ExecutionResult,
    ) -> JsonDoc {
        let Some(cli) = &self.profile.cli else {
            return JsonDoc::Answer;
        };
        let out = &cli.output;
        let Some(bytes) = outcome.stdout.full() else {
            if outcome.stdout.full_overflowed() {
                tracing::warn!(instrument = %self.profile.name, "JSON output larger than {JSON_DOCUMENT_LIMIT} bytes; using raw text");
                // Too big to parse is not "no answer".
                return JsonDoc::Answer;
            }
            return JsonDoc::Empty;
        };
        let text = String::from_utf8_lossy(bytes);
        if text.trim().is_empty() {
            return JsonDoc::Empty;
        }
        let doc: Value = match serde_json::from_str(text.trim()) {
            Ok(v) => v,
            Err(err) => {
                tracing::warn!(instrument = %self.profile.name, %err, "instrument output is not one JSON document; using raw text");
                return JsonDoc::NotJson(head(&text));
            }
        };
        let error = out.error_path.as_deref().and_then(|p| resolve(&doc, p));
        let answer = out.result_path.as_deref().and_then(|p| resolve(&doc, p));
        let state = match (&out.result_path, answer, error) {
            (_, Some(_), _) | (None, None, None) => JsonDoc::Answer,
            (_, None, Some(e)) => JsonDoc::Error(to_text(e)),
            (Some(p), None, None) => JsonDoc::NoResult(p.clone()),
        };
        if success {
            if let Some(v) = answer {
                result.result_text = Some(to_text(v));
            }
        } else if let Some(v) = error {
            // Worded as a text profile's failure is: the profile's name, how it exited, its
            // own words ("My agent exited with code 1: …").
            let name = &self.profile.display_name;
            let said = to_text(v);
            result.error_message = Some(match outcome.exit_code {
                Some(code) if code != 0 => format!("{name} exited with code {code}: {said}"),
                _ => said,
            });
        } else if let Some(said) = answer.map(to_text).filter(|t| !t.trim().is_empty()) {
            // A CLI that reports its failure as its answer (Claude Code's `result`: "Invalid
            // API key · Fix external API key", `is_error: true`): its words are the cause,
            // where "exited with code 1" alone said nothing.
            let name = &self.profile.display_name;
            result.error_message = Some(match outcome.exit_code {
                Some(code) => format!("{name} exited with code {code}: {}", head(&said)),
                None => head(&said),
            });
        }
        let tokens = |path: &Option<String>| -> Option<u64> {
            let path = path.as_deref()?;
            if out.aggregate_tokens {
                let counts: Vec<Option<u64>> = resolve_all(&doc, path)
                    .iter()
                    .map(|v| crate::types::token_count(v))
                    .collect();
                // One count that cannot be one makes the sum unknown, not smaller.
                let sum = counts
                    .iter()
                    .try_fold(0u64, |sum, n| n.map(|n| sum.saturating_add(n)))?;
                (sum > 0 && sum <= crate::types::MAX_ATTEMPT_TOKENS).then_some(sum)
            } else {
                resolve(&doc, path).and_then(crate::types::token_count)
            }
        };
        result.input_tokens = tokens(&out.input_tokens_path);
        result.output_tokens = tokens(&out.output_tokens_path);
        result.api_error_status = out
            .api_status_path
            .as_deref()
            .and_then(|p| resolve(&doc, p))
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok());
        result.cost_usd = out
            .cost_path
            .as_deref()
            .and_then(|p| resolve(&doc, p))
            .and_then(Value::as_f64)
            .filter(|c| c.is_finite() && *c >= 0.0);
        state
    }
}

/// How a profile instrument's run ended, decided once from its outcome: success is
/// [`RunEnd::Succeeded`] only, and the failure's message is worded from it. (A run the
/// conductor stopped on the CLI's live output is a [`Verdict`] instead.)
enum RunEnd {
    /// Exited with a code of the profile's success set, with its answer.
    Succeeded,
    /// Exited with a success code but gave no usable answer.
    NoAnswer(NoAnswer),
    /// Ran past its timeout.
    TimedOut,
    /// Exited with a code outside the success set.
    Exited(i32),
    /// Ended by a signal, not by exiting.
    Killed,
}

impl RunEnd {
    /// `exited_ok`: not timed out, and an exit code of the success set; `no_answer`: why
    /// such a run has no answer. A structured run that "succeeded" without its answer did
    /// nothing we can use (issue 13: exit 0 with no output, non-JSON, a JSON error object).
    fn of(outcome: &ProcessOutcome, exited_ok: bool, no_answer: Option<NoAnswer>) -> RunEnd {
        if outcome.timed_out {
            RunEnd::TimedOut
        } else if exited_ok {
            no_answer.map_or(RunEnd::Succeeded, RunEnd::NoAnswer)
        } else {
            outcome.exit_code.map_or(RunEnd::Killed, RunEnd::Exited)
        }
    }
}

/// Why a structured run that exited as success gave no usable answer (issue 13).
enum NoAnswer {
    /// It printed nothing.
    Empty,
    /// Text that is not one JSON document (its start).
    NotJson(String),
    /// It reported an error (at the profile's `error_path`, or in a JSONL error event).
    Error(String),
    /// A JSON document without the profile's `result_path`.
    NoResult(String),
    /// No JSON lines at all (the start of what it printed).
    NoJsonLines(String),
    /// JSON lines without the completion event of this type.
    NoCompletion(String),
}

impl NoAnswer {
    /// What the user reads, for the instrument called `name`.
    fn message(&self, name: &str) -> String {
        match self {
            NoAnswer::Empty => format!("{name} exited 0 without printing anything: it did no work"),
            NoAnswer::NotJson(head) => format!(
                "{name} printed output that is not one JSON document (the profile \
                 expects `json`): {head}"
            ),
            NoAnswer::Error(msg) => format!("{name} reported an error: {msg}"),
            NoAnswer::NoResult(path) => {
                format!("{name} exited 0 but its JSON has no `{path}`: no answer")
            }
            NoAnswer::NoJsonLines(head) => {
                format!("{name} printed no JSON lines (the profile expects `jsonl`): {head}")
            }
            NoAnswer::NoCompletion(kind) => {
                format!("{name} exited 0 without its completion event (`{kind}`): no answer")
            }
        }
    }
}

impl JsonDoc {
    /// Why this document is no answer, if it is none.
    fn missing(self) -> Option<NoAnswer> {
        match self {
            JsonDoc::Answer => None,
            JsonDoc::Empty => Some(NoAnswer::Empty),
            JsonDoc::NotJson(head) => Some(NoAnswer::NotJson(head)),
            JsonDoc::Error(msg) => Some(NoAnswer::Error(msg)),
            JsonDoc::NoResult(path) => Some(NoAnswer::NoResult(path)),
        }
    }
}

/// What a `json` instrument printed.
enum JsonDoc {
    /// The answer (or a document without a result path to check).
    Answer,
    /// Nothing at all.
    Empty,
    /// Text that is not one JSON document (its start).
    NotJson(String),
    /// A document carrying an error at the profile's `error_path`.
    Error(String),
    /// A document without the profile's `result_path`.
    NoResult(String),
}

/// The first 200 characters of `text`, on one line.
fn head(text: &str) -> String {
    let one_line = text.trim().replace('\n', " ");
    let mut h: String = one_line.chars().take(200).collect();
    if one_line.chars().count() > 200 {
        h.push('…');
    }
    h
}

/// What a JSONL stream yielded.
#[derive(Debug, Default)]
struct JsonlState {
    result_text: Option<String>,
    completion_seen: bool,
    /// JSON lines seen.
    events: u32,
    /// The last error the stream reported (`{"type":"error","message":…}`, or an
    /// `error.message` such as Codex's `turn.failed`).
    error_message: Option<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    /// What the stream says the run cost (`cli.output.cost_path`), used as the exact cost.
    cost_usd: Option<f64>,
}

static STATUS_IN_TEXT: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"(?i)\bstatus:?\s+(\d{3})\b")
        .unwrap_or_else(|err| panic!("status pattern does not compile: {err}"))
});

/// The HTTP status an instrument's error message names, when it is a rate limit (429) or a
/// server-side failure (5xx): Codex 0.169 says "unexpected status 503 Service Unavailable: …"
/// and "exceeded retry limit, last status: 429 Too Many Requests". The classifier then reads
/// it as the API's status, as it reads Claude's `api_error_status`: an overloaded API is
/// retried with the score's backoff instead of parking the instrument as rate limited.
/// (401 / 403 stay with the profile's auth patterns, whose hint names the profile's keys.)
pub fn api_status_in(message: &str) -> Option<u16> {
    STATUS_IN_TEXT
        .captures_iter(message)
        .filter_map(|c| c.get(1)?.as_str().parse::<u16>().ok())
        .find(|s| *s == 429 || (500..=599).contains(s))
}

/// Reads a CLI's retry announcements (stderr lines, JSONL error messages): progress for the
/// retries the CLI may make, a verdict that stops it for those it may not (crate::live).
#[derive(Clone)]
struct RetryWatch {
    watch: Arc<Watch>,
    patterns: ErrorPatterns,
    progress: Arc<crate::types::Progress>,
}

impl RetryWatch {
    /// Handle one line; true when it was a retry announcement.
    fn line(&self, line: &str) -> bool {
        let Some(notice) = retry_notice(line.trim()) else {
            return false;
        };
        let judgement = judge(notice.status, &notice.cause, Some(&self.patterns));
        let said = || crate::classify::short(line.trim(), 300);
        match judgement {
            Judgement::Auth => self.watch.decide(Verdict::Auth {
                status: notice.status,
                said: said(),
            }),
            Judgement::RateLimit => self.watch.decide(Verdict::RateLimit {
                status: notice.status,
                retry_after: notice.retry_after,
                said: said(),
            }),
            Judgement::Overload | Judgement::Other => {}
        }
        let text = retry_progress(judgement, &notice, None);
        self.progress.update_activity(|a| {
            a.api_retries += 1;
            a.last_event = Some(text);
        });
        true
    }
}

struct JsonlSink {
    config: CliOutputConfig,
    state: Arc<Mutex<JsonlState>>,
    /// Where `mozart status` reads the run's activity while it streams.
    progress: Arc<crate::types::Progress>,
    /// The CLI's retry announcements among its error events (Codex's reconnects).
    retries: RetryWatch,
}

/// Live progress from one JSONL event: tokens at the profile's paths, tool items (Codex's
/// `item.started` of a command, file change or MCP call) and error events (a retry
/// announcement among them is the [`RetryWatch`]'s).
fn note_jsonl_activity(
    progress: &crate::types::Progress,
    c: &CliOutputConfig,
    event: &Value,
    retries: &RetryWatch,
) {
    let number = |path: &Option<String>| {
        path.as_deref()
            .and_then(|p| resolve(event, p))
            .and_then(crate::types::token_count)
    };
    let (input, output) = (number(&c.input_tokens_path), number(&c.output_tokens_path));
    let tool = (event.get("type").and_then(Value::as_str) == Some("item.started"))
        .then(|| event.pointer("/item/type").and_then(Value::as_str))
        .flatten()
        .filter(|t| !matches!(*t, "agent_message" | "reasoning" | "error"))
        .map(str::to_string);
    let error = (event.get("type").and_then(Value::as_str) == Some("error"))
        .then(|| event.get("message").and_then(Value::as_str))
        .flatten()
        // Shown live by `status` and `logs --follow`: an error text is the instrument's.
        .map(crate::redact::redact);
    let error = error.filter(|e| !retries.line(e));
    progress.update_activity(|a| {
        if let Some(i) = input {
            a.input_tokens = a.input_tokens.saturating_add(i);
        }
        if let Some(o) = output {
            a.output_tokens = a.output_tokens.saturating_add(o);
        }
        if let Some(t) = tool {
            a.tool_calls += 1;
            a.last_event = Some(format!("tool call: {t}"));
            a.last_tool = Some(t);
        }
        if let Some(e) = error {
            a.last_event = Some(e);
        }
    });
}

impl LineSink for JsonlSink {
    fn line(&mut self, line: &[u8]) {
        let Ok(event) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        note_jsonl_activity(&self.progress, &self.config, &event, &self.retries);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.events += 1;
        let error = event
            .pointer("/error/message")
            .or_else(|| {
                (event.get("type").and_then(Value::as_str) == Some("error"))
                    .then(|| event.get("message"))
                    .flatten()
            })
            .and_then(Value::as_str);
        if let Some(msg) = error {
            st.error_message = Some(msg.to_string());
        }
        let c = &self.config;
        if !st.completion_seen {
            if let Some(kind) = &c.completion_event_type {
                let type_ok = event.get("type").and_then(Value::as_str) == Some(kind.as_str());
                let filter_ok = c
                    .completion_event_filter
                    .iter()
                    .all(|(k, v)| resolve(&event, k) == Some(v));
                if type_ok && filter_ok {
                    st.completion_seen = true;
                    st.result_text = c
                        .result_path
                        .as_deref()
                        .and_then(|p| resolve(&event, p))
                        .map(to_text);
                }
            }
        }
        let number = |path: &Option<String>| {
            path.as_deref()
                .and_then(|p| resolve(&event, p))
                .and_then(crate::types::token_count)
        };
        if st.input_tokens.is_none() {
            st.input_tokens = number(&c.input_tokens_path);
        }
        if st.output_tokens.is_none() {
            st.output_tokens = number(&c.output_tokens_path);
        }
        if st.cost_usd.is_none() {
            st.cost_usd = c
                .cost_path
                .as_deref()
                .and_then(|p| resolve(&event, p))
                .and_then(Value::as_f64)
                .filter(|c| c.is_finite() && *c >= 0.0);
        }
    }
}

impl Backend for ProfileBackend {
    #[allow(clippy::misnamed_getters)] // the backend's name is the profile's display name (§4.3)
    fn name(&self) -> &str {
        &self.profile.display_name
    }

    fn execute(&self, req: ExecutionRequest) -> BoxFuture<'_, ExecutionResult> {
        Box::pin(self.run(req))
    }

    fn health_check(&self) -> BoxFuture<'_, HealthStatus> {
        Box::pin(async move {
            let exe = self
                .profile
                .cli
                .as_ref()
                .map(|c| c.command.executable.clone())
                .unwrap_or_default();
            let missing = format!("{exe} not found on PATH");
            binary_health(&exe, missing)
        })
    }
}

/// Whether the program `exe` is on the PATH, as a health status; `missing` is the detail
/// when it is not.
pub(crate) fn binary_health(exe: &str, missing: String) -> HealthStatus {
    match which(exe) {
        Some(path) => HealthStatus {
            ready: true,
            detail: format!("{exe} found at {}", path.display()),
            binary_path: Some(path),
        },
        None => HealthStatus {
            ready: false,
            binary_path: None,
            detail: missing,
        },
    }
}

/// The result fields every CLI instrument reads from its finished process alike.
pub(crate) fn base_result(outcome: &ProcessOutcome) -> ExecutionResult {
    ExecutionResult {
        exit_code: outcome.exit_code,
        // A timeout that needed SIGKILL (for the leader or a process it started) says so,
        // not the SIGTERM the leader alone died of.
        exit_signal: if outcome.timed_out && outcome.escalated {
            Some(9)
        } else {
            outcome.exit_signal
        },
        stdout_bytes: outcome.stdout.total,
        stderr_bytes: outcome.stderr.total,
        duration_seconds: outcome.duration.as_secs_f64(),
        started_at_epoch: outcome.started_at_epoch,
        ..Default::default()
    }
}

/// The failed result of a CLI instrument that could not be started: `not_found` (exit 127,
/// with the message given) when the program is missing, `configuration` when the start was
/// refused as configured (a Slurm placement's bad partition or account, in Slurm's words: a
/// retry would be refused the same way), else `exception` ("Failed to start `what`").
pub(crate) fn spawn_failure(
    err: &std::io::Error,
    not_found: String,
    what: &str,
) -> ExecutionResult {
    let (code, kind, message) = match err.kind() {
        // The prompt went as an argument and is over the kernel's limit for one: no retry
        // can pass it (docs/instruments.md, "Where the prompt goes").
        _ if err.raw_os_error() == Some(nix::libc::E2BIG) => (
            None,
            FailureKind::Configuration,
            format!(
                "Failed to start {what}: the prompt is too long to pass as a command-line argument \
                 (Linux allows 128 KiB for one): give the profile prompt_stdin_args so it goes on \
                 stdin, or shorten the prompt"
            ),
        ),
        std::io::ErrorKind::NotFound => (Some(127), FailureKind::NotFound, not_found),
        std::io::ErrorKind::InvalidInput => (None, FailureKind::Configuration, err.to_string()),
        _ => (
            None,
            FailureKind::Exception,
            format!("Failed to start {what}: {err}"),
        ),
    };
    ExecutionResult::start_failure(code, kind, message)
}

/// A process that timed out or was killed by `signal`: the result says so (a timeout's
/// error type is `timeout`, its message [`timeout_message`]; [`note_end`]). Whether the run
/// succeeded is not decided here: each backend decides it once, and a timed-out run never
/// exited as a success.
pub(crate) fn note_abnormal_end(
    result: &mut ExecutionResult,
    timed_out: bool,
    signal: Option<i32>,
    timeout: std::time::Duration,
) {
    if timed_out {
        result.error_type = Some(FailureKind::Timeout);
        result.error_message = Some(timeout_message(timeout));
    }
    note_end(result, timed_out, signal);
}

/// How a process ended, when not by exiting in time: the result's `timed_out` and exit
/// reason (the kind and message are the backend's verdict).
///
/// The command's stderr stays what the command printed: upstream appends `Command timed
/// out after Ns` or `[Process killed by SIGKILL]` to it, which `errors`, `logs` and `run`
/// then showed as the command's own words. The result's `exit_signal` and message say it
/// (`Timed out after Ns`; the classifier's `Process killed by SIGKILL, not by Mozart …`).
pub(crate) fn note_end(result: &mut ExecutionResult, timed_out: bool, signal: Option<i32>) {
    if timed_out {
        result.timed_out = true;
        result.exit_reason = ExitReason::Timeout;
    } else if signal.is_some() {
        result.exit_reason = ExitReason::Killed;
    }
}

/// The message of a run that ran past its `timeout`.
pub(crate) fn timeout_message(timeout: std::time::Duration) -> String {
    format!("Timed out after {}s", timeout.as_secs_f64())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::types::{COST_ESTIMATED, COST_EXACT};
    use std::time::Duration;

    /// `sh -c <prompt>` with `format: json` output, answer at `result`.
    fn json_backend() -> ProfileBackend {
        let yaml = "name: json-sh\ndisplay_name: JSON sh\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n  output:\n    format: json\n    result_path: result\n    output_tokens_path: usage.out\n";
        ProfileBackend::new(Arc::new(
            InstrumentProfile::from_yaml(yaml, "test").unwrap(),
        ))
        .unwrap()
    }

    /// A CLI that gives up by itself on a refused key, printing the API's JSON error, with a
    /// profile whose own patterns call it something else: the sheet fails as auth (the
    /// JSON error decides), so its message names the key to check.
    #[tokio::test]
    async fn a_refused_key_named_by_the_json_error_gets_the_key_hint() {
        let yaml = "name: keyed\ndisplay_name: Keyed\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n    required_env: [MY_API_KEY, PATH]\n  output:\n    format: text\n";
        let backend = ProfileBackend::new(Arc::new(
            InstrumentProfile::from_yaml(yaml, "test").unwrap(),
        ))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let prompt = r#"echo '{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'; echo 'gave up' >&2; exit 1"#;
        let result = backend
            .execute(ExecutionRequest::new(
                prompt.to_string(),
                dir.path(),
                Duration::from_secs(60),
            ))
            .await;
        assert!(!result.success);
        assert_eq!(
            crate::classify::classify(&result).category,
            crate::classify::ErrorCategory::Auth,
            "{result:?}"
        );
        let message = result.error_message.unwrap_or_default();
        assert!(message.contains("MY_API_KEY"), "{message}");
    }

    /// Claude Code's answer to a refused key on the `claude-code` profile's terms (`json`,
    /// the error in `result`, the status at `api_error_status`): the sheet's error carries
    /// the CLI's own words and one whole hint. Users read "Claude Code exited with code 1.
    /// Authentication failed: check … in the conductor's environment, or. Check the key …":
    /// no cause, a hint cut mid-sentence and a second one after it.
    #[tokio::test]
    async fn a_refused_key_reported_as_the_answer_is_named_with_one_whole_hint() {
        let yaml = "name: cc\ndisplay_name: Claude Code\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n    required_env: [ANTHROPIC_API_KEY, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, ANTHROPIC_AUTH_TOKEN, PATH]\n  output:\n    format: json\n    result_path: result\n    error_path: error.message\n    api_status_path: api_error_status\n    cost_path: total_cost_usd\n  errors:\n    auth_error_patterns: [\"unauthorized\", \"invalid.*api.*key\"]\n";
        let backend = ProfileBackend::new(Arc::new(
            InstrumentProfile::from_yaml(yaml, "test").unwrap(),
        ))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let prompt = r#"echo '{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"api_error_type":"authentication_error","result":"Invalid API key · Fix external API key","total_cost_usd":0}'; exit 1"#;
        let result = backend
            .execute(ExecutionRequest::new(
                prompt.to_string(),
                dir.path(),
                Duration::from_secs(60),
            ))
            .await;
        assert!(!result.success);
        let c = crate::classify::classify_for(&result, "claude-code");
        assert_eq!(c.category, crate::classify::ErrorCategory::Auth, "{c:?}");
        let message = c.message;
        assert!(
            message
                .contains("Claude Code exited with code 1: Invalid API key · Fix external API key"),
            "the CLI's words: {message}"
        );
        // The profile's hint, whole, and no second hint after it.
        assert!(
            message.ends_with("in the conductor's environment, or log the CLI in")
                || message.ends_with("in the conductor's environment: set one, or log the CLI in"),
            "{message}"
        );
        assert_eq!(message.matches("log the CLI in").count(), 1, "{message}");
        assert_eq!(
            message.matches("in the conductor's environment").count(),
            1,
            "{message}"
        );
    }

    /// After a refused key the hint names the key variables the conductor's environment
    /// sets (the one that was refused), or all of the profile's when it sets none.
    /// A shell command printing `{"result":"xxx…","usage":{"out":7}}` with `n` x's.
    fn document_of(n: usize) -> String {
        format!(
            "printf '{{\"result\":\"'; head -c {n} /dev/zero | tr '\\0' x; printf '\",\"usage\":{{\"out\":7}}}}\\n'"
        )
    }

    /// `command` run by the profile `yaml` (a `sh -c` instrument) in a fresh directory.
    async fn run_profile(yaml: &str, command: &str) -> ExecutionResult {
        let backend = ProfileBackend::new(Arc::new(
            InstrumentProfile::from_yaml(yaml, "test").unwrap(),
        ))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        backend
            .execute(ExecutionRequest::new(
                command.to_string(),
                dir.path(),
                Duration::from_secs(60),
            ))
            .await
    }

    async fn run(prompt: String) -> ExecutionResult {
        let dir = tempfile::tempdir().unwrap();
        json_backend()
            .execute(ExecutionRequest::new(
                prompt,
                dir.path(),
                Duration::from_secs(60),
            ))
            .await
    }

    /// A priced `json` profile reading `usage.in` / `usage.out`, with `default_model`.
    async fn priced(default_model: &str, model: Option<&str>) -> ExecutionResult {
        let yaml = format!("name: priced\ndisplay_name: Priced\nkind: cli\ndefault_model: {default_model}\nmodels:\n  - {{name: m1, context_window: 1000, cost_per_1k_input: 0.01, cost_per_1k_output: 0.1}}\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n  output:\n    format: json\n    result_path: result\n    input_tokens_path: usage.in\n    output_tokens_path: usage.out\n");
        let backend = ProfileBackend::new(Arc::new(
            InstrumentProfile::from_yaml(&yaml, "test").unwrap(),
        ))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut req = ExecutionRequest::new(
            r#"echo '{"result":"ok","usage":{"in":1000,"out":100}}'"#.to_string(),
            dir.path(),
            Duration::from_secs(60),
        );
        req.model = model.map(str::to_string);
        backend.execute(req).await
    }

    #[tokio::test]
    async fn reported_tokens_are_priced_from_the_profile_and_say_how_sure() {
        // The model that ran is listed: exact. ($0.01 for 1000 in + $0.01 for 100 out.)
        let exact = priced("m1", None).await;
        assert!(exact.success, "{:?}", exact.error_message);
        assert!((exact.cost_usd.unwrap() - 0.02).abs() < 1e-9, "{exact:?}");
        assert_eq!(exact.cost_confidence, Some(COST_EXACT));
        // Another model ran: priced at the profile's pricing model, as an estimate.
        let other = priced("m1", Some("unlisted")).await;
        assert!((other.cost_usd.unwrap() - 0.02).abs() < 1e-9, "{other:?}");
        assert_eq!(other.cost_confidence, Some(COST_ESTIMATED));
    }

    /// A `jsonl` profile's `cost_path` is the run's exact cost, as a `json` profile's is
    /// (it was ignored: the tokens were priced from `models`, and cost limits tripped on
    /// that figure).
    #[tokio::test]
    async fn a_jsonl_profiles_cost_path_is_the_exact_cost() {
        let yaml = "name: jl\ndisplay_name: JL\nkind: cli\nmodels:\n  - {name: m1, context_window: 1000, cost_per_1k_input: 1.0, cost_per_1k_output: 1.0}\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n  output:\n    format: jsonl\n    completion_event_type: result\n    completion_event_filter: {subtype: final}\n    result_path: text\n    input_tokens_path: usage.input\n    output_tokens_path: usage.output\n    cost_path: cost\n";
        let result = run_profile(
            yaml,
            r#"echo '{"type":"result","subtype":"final","text":"the answer","usage":{"input":2000,"output":1000},"cost":0.42}'"#,
        )
        .await;
        assert!(result.success, "{:?}", result.error_message);
        assert_eq!(result.cost_usd, Some(0.42), "{result:?}");
        assert_eq!(result.cost_confidence, Some(COST_EXACT));
    }

    /// A `json` profile's error (exit 1) is worded as a text profile's: its display name,
    /// how it exited, its words — what the errors table of instruments.md shows.
    #[tokio::test]
    async fn a_json_profiles_error_names_the_profile_and_its_exit() {
        let yaml = "name: ja\ndisplay_name: My agent\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n  output:\n    format: json\n    result_path: answer\n    error_path: error.message\n";
        let result = run_profile(
            yaml,
            r#"echo '{"error": {"message": "model client crashed: ECONNRESET"}}'; exit 1"#,
        )
        .await;
        assert!(!result.success);
        let c = crate::classify::classify_for(&result, "ja");
        assert_eq!(
            c.message, "My agent exited with code 1: model client crashed: ECONNRESET",
            "{c:?}"
        );
    }

    #[tokio::test]
    async fn a_json_answer_under_the_limit_is_parsed() {
        let result = run(document_of(1_000_000)).await;
        assert!(result.success, "{:?}", result.error_message);
        assert_eq!(result.result_text.as_deref().map(str::len), Some(1_000_000));
        assert_eq!(result.output_tokens, Some(7));
    }

    #[tokio::test]
    async fn a_json_document_over_the_limit_is_counted_and_only_its_tail_kept() {
        // Issue 4: a large output must not be held whole by the conductor (20 MB bar; a
        // document is held about four times while parsed, so 5 MB is already too much).
        let result = run(document_of(5_000_000)).await;
        assert!(result.success, "{:?}", result.error_message);
        assert!(result.stdout_bytes > JSON_DOCUMENT_LIMIT as u64);
        assert_eq!(result.result_text, None);
        assert_eq!(result.output_tokens, None);
        assert!(result.stdout.len() <= crate::process::TAIL_BYTES);
        assert!(result.stdout.ends_with("\"usage\":{\"out\":7}}\n"));
    }

    /// `sh -c <prompt>` with `format: jsonl` output and a `result` completion event.
    fn jsonl_backend() -> ProfileBackend {
        let yaml = "name: jsonl-sh\ndisplay_name: JSONL sh\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n  output:\n    format: jsonl\n    completion_event_type: result\n    result_path: result\n";
        ProfileBackend::new(Arc::new(
            InstrumentProfile::from_yaml(yaml, "test").unwrap(),
        ))
        .unwrap()
    }

    #[tokio::test]
    async fn a_jsonl_completion_event_too_long_to_parse_is_not_a_missing_answer() {
        // The bench's capture-jsonl job: one 100 MB event line. It is dropped unparsed
        // (bounded memory), so whether it was the completion event is unknown — the run
        // is judged by its exit code and validations, not failed as "no JSON lines".
        let n = crate::process::MAX_LINE_BYTES + 1_000;
        let prompt = format!(
            "printf '{{\"type\":\"result\",\"result\":\"'; head -c {n} /dev/zero | tr '\\0' x; printf '\"}}\\n'"
        );
        let dir = tempfile::tempdir().unwrap();
        let req = ExecutionRequest::new(prompt, dir.path(), Duration::from_secs(60));
        let result = jsonl_backend().execute(req).await;
        assert!(result.success, "{:?}", result.error_message);
        assert!(result.stdout_bytes > crate::process::MAX_LINE_BYTES as u64);

        // A short output with no JSON at all is still the bad input it was.
        let req = ExecutionRequest::new(
            "echo plain text".to_string(),
            dir.path(),
            Duration::from_secs(60),
        );
        let result = jsonl_backend().execute(req).await;
        assert!(!result.success);
        let message = result.error_message.unwrap_or_default();
        assert!(message.contains("printed no JSON lines"), "{message}");
    }

    #[test]
    fn codex_failures_name_the_api_status_of_limits_and_server_errors_only() {
        let overload = "unexpected status 503 Service Unavailable: The server is overloaded \
                        or not ready yet., url: http://127.0.0.1:4290/v1/responses";
        assert_eq!(api_status_in(overload), Some(503));
        assert_eq!(
            api_status_in("exceeded retry limit, last status: 429 Too Many Requests"),
            Some(429)
        );
        assert_eq!(
            api_status_in("unexpected status 401 Unauthorized: Incorrect API key provided"),
            None
        );
        assert_eq!(api_status_in("thread 01a21274-4290-7f03 failed"), None);
    }

    #[test]
    fn codex_reconnects_read_as_retries_and_stop_it_on_a_refused_key() {
        let retries = RetryWatch {
            watch: Watch::new(),
            patterns: codex_patterns(),
            progress: Arc::new(crate::types::Progress::new()),
        };
        assert!(retries
            .line("Reconnecting... 2/5 (unexpected status 503 Service Unavailable: overloaded)"));
        assert_eq!(
            retries.progress.activity().last_event.as_deref(),
            Some("API overloaded (HTTP 503): the CLI retries by itself (retry 2/5)")
        );
        assert!(
            retries.watch.verdict().is_none(),
            "an overload is the CLI's to retry"
        );
        assert!(!retries.line("unexpected status 503"));
        assert!(retries.line(
            "Reconnecting... 1/5 (unexpected status 401 Unauthorized: Incorrect API key provided)"
        ));
        assert!(matches!(
            retries.watch.verdict(),
            Some(Verdict::Auth {
                status: Some(401),
                ..
            })
        ));
    }

    fn codex_patterns() -> ErrorPatterns {
        let yaml = "name: c\ndisplay_name: C\nkind: cli\ncli:\n  command:\n    executable: codex\n  errors:\n    auth_error_patterns: [\"incorrect api key\"]\n";
        let profile = InstrumentProfile::from_yaml(yaml, "test").unwrap();
        ErrorPatterns::compile("c", &profile.cli.unwrap().errors).unwrap()
    }

    #[tokio::test]
    async fn a_stdin_profile_writes_the_prompt_to_stdin_and_not_the_command_line() {
        // `sh -c 'echo "args: $*"; cat' sh --flag`: prints its arguments, then its stdin.
        let yaml = "name: stdin-sh\ndisplay_name: stdin sh\nkind: cli\ncli:\n  command:\n    executable: sh\n    subcommand: '-c'\n    auto_approve_flag: 'echo \"args: $*\"; cat'\n    prompt_flag: '-p'\n    prompt_stdin_args: ['sh', '--flag']\n";
        let backend = ProfileBackend::new(Arc::new(
            InstrumentProfile::from_yaml(yaml, "test").unwrap(),
        ))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let prompt = "the secret plan\nRUN: nothing".to_string();
        let req = ExecutionRequest::new(prompt.clone(), dir.path(), Duration::from_secs(60));
        let args = backend.build_args(&req, None);
        assert!(
            !args.iter().any(|a| a.contains("secret plan")) && !args.contains(&"-p".to_string()),
            "{args:?}"
        );
        let result = backend.execute(req).await;
        assert!(result.success, "{result:?}");
        assert_eq!(result.stdout, format!("args: --flag\n{prompt}"));
    }
}
