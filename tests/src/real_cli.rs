//! Running the real AI CLIs (installed by `tests/real-cli/setup.sh`) under a real conductor
//! against [`crate::mock_api::MockApi`] (issue 13), and the checks every CLI's tests share:
//! each `tests/real_cli_<cli>.rs` names its [`RealCli`], generates the common tests with
//! [`real_cli_tests!`](crate::real_cli_tests) and adds what only that CLI does.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::mock_api::{MockApi, FILE_CONTENT, INPUT_TOKENS, OUTPUT_TOKENS};
use crate::{stdout, TestEnv};

/// One of the real CLIs, the instrument that plays it, and what its tests expect of it.
#[derive(Debug, Clone, Copy)]
pub struct RealCli {
    /// The executable (`claude`, `gemini`, `codex`).
    pub program: &'static str,
    /// The instrument of the scores; empty: none named, the default (`claude_cli`).
    pub instrument: &'static str,
    /// More `backend:` settings of its scores (lines, indented).
    pub backend: &'static str,
    /// Extra environment of the conductor (empty value: removed).
    pub vars: &'static [(&'static str, &'static str)],
    /// The API key variable an auth failure's hint names.
    pub key_var: &'static str,
    /// Sheet timeout of the hang test: long enough for the CLI to start and call the API.
    pub hang_timeout: u32,
    /// The CLI reports its own cost estimate.
    pub reports_cost: bool,
    /// USD per 1k (input, output) tokens the conductor prices the CLI's tokens at (from the
    /// instrument profile), when the CLI reports tokens but no cost.
    pub priced_at: Option<(f64, f64)>,
    /// The `cost_confidence` its sheets get: 1.0 exact, 0.5 estimated, 0.0 unknown.
    pub cost_confidence: f64,
}

/// Claude Code as a new user runs it: a score that names no instrument (`claude_cli`, with
/// its default `output_format`, stream-json, so progress, tokens and cost are live).
pub const CLAUDE: RealCli = RealCli {
    program: "claude",
    instrument: "",
    backend: "",
    // As root the CLI refuses to skip permissions unless told it runs in a sandbox.
    vars: &[("IS_SANDBOX", "1")],
    key_var: "ANTHROPIC_API_KEY",
    hang_timeout: 4,
    reports_cost: true,
    priced_at: None,
    cost_confidence: 1.0,
};

/// Claude Code on `claude_cli` with `output_format: text` (upstream's default): nothing is
/// reported until the CLI exits.
pub const CLAUDE_TEXT: RealCli = RealCli {
    program: "claude",
    instrument: "claude_cli",
    backend: "\n  output_format: text",
    vars: &[("IS_SANDBOX", "1")],
    key_var: "ANTHROPIC_API_KEY",
    hang_timeout: 4,
    reports_cost: false,
    priced_at: None,
    cost_confidence: 0.0,
};

/// Claude Code on `claude_cli` with `output_format: json`: one result object at the end.
pub const CLAUDE_JSON: RealCli = RealCli {
    program: "claude",
    instrument: "claude_cli",
    backend: "\n  output_format: json",
    vars: &[("IS_SANDBOX", "1")],
    key_var: "ANTHROPIC_API_KEY",
    hang_timeout: 4,
    reports_cost: true,
    priced_at: None,
    cost_confidence: 1.0,
};

/// Claude Code on the generic `claude-code` profile (`json`): tokens, and the CLI's own
/// cost read at `total_cost_usd`.
pub const CLAUDE_CODE: RealCli = RealCli {
    program: "claude",
    instrument: "claude-code",
    backend: "",
    vars: &[("IS_SANDBOX", "1")],
    key_var: "ANTHROPIC_API_KEY",
    hang_timeout: 4,
    reports_cost: true,
    priced_at: None,
    cost_confidence: 1.0,
};

/// Gemini CLI on the `gemini-cli` profile: its tokens priced exactly (the profile's
/// default model, `gemini-2.5-pro`, is the one it runs and is in its price list).
pub const GEMINI: RealCli = RealCli {
    program: "gemini",
    instrument: "gemini-cli",
    backend: "",
    vars: &[],
    key_var: "GEMINI_API_KEY",
    hang_timeout: 12,
    reports_cost: false,
    priced_at: Some((0.00125, 0.005)),
    cost_confidence: 1.0,
};

/// Codex CLI on the `codex-cli` profile: exact tokens, but the model comes from its own
/// `config.toml` and is not reported, so the cost is an estimate at the profile's first
/// model (`o3`).
pub const CODEX: RealCli = RealCli {
    program: "codex",
    instrument: "codex-cli",
    backend: "",
    vars: &[],
    key_var: "OPENAI_API_KEY",
    hang_timeout: 8,
    reports_cost: false,
    priced_at: Some((0.01, 0.04)),
    cost_confidence: 0.5,
};

impl RealCli {
    /// The score lines choosing this instrument with a sheet timeout of `timeout` seconds.
    pub fn instrument(&self, timeout: u32) -> String {
        let named = match self.instrument {
            "" => String::new(),
            name => format!("instrument: {name}\n"),
        };
        format!(
            "{named}backend:\n  timeout_seconds: {timeout}{}",
            self.backend
        )
    }
}

/// `node_modules/.bin` of the installed CLIs (`$MOZART_REAL_CLI_DIR` overrides).
pub fn real_cli_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MOZART_REAL_CLI_DIR") {
        return PathBuf::from(dir);
    }
    // bin_dir() is target/<profile>; setup.sh installs into target/real-cli.
    let mut dir = crate::bin_dir();
    dir.pop();
    dir.join("real-cli/node_modules/.bin")
}

/// The installed CLI `name` (`claude`, `gemini`, `codex`), if any.
pub fn real_cli(name: &str) -> Option<PathBuf> {
    let path = real_cli_bin_dir().join(name);
    path.exists().then_some(path)
}

/// An isolated conductor whose `claude` / `gemini` / `codex` are the real CLIs, talking to a
/// fresh mock API, with a throwaway `HOME` configured for it.
#[derive(Debug)]
pub struct RealCliEnv {
    /// The Mozart test environment (its `bin` holds the real CLIs).
    pub env: TestEnv,
    /// The mock API.
    pub mock: MockApi,
    /// `HOME` of the CLIs (settings for Gemini, `CODEX_HOME` for Codex).
    pub cli_home: PathBuf,
    /// Extra environment for the conductor (and so the CLIs).
    pub vars: Vec<(String, String)>,
}

impl RealCliEnv {
    /// Set up for `cli`, or print why the test is skipped and return `None`.
    ///
    /// # Panics
    /// If the temporary directories or the mock cannot be set up.
    #[allow(clippy::expect_used)]
    pub fn new(cli: &str) -> Option<RealCliEnv> {
        let Some(path) = real_cli(cli) else {
            crate::users::missing(
                &format!("the real `{cli}` CLI in {}", real_cli_bin_dir().display()),
                "run tests/real-cli/setup.sh",
            );
            return None;
        };
        let env = TestEnv::new();
        let link = env.bin.join(cli);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&path, &link).expect("link the real CLI");
        let mock = MockApi::start().expect("start the mock API");
        let cli_home = env.root().join("cli-home");
        std::fs::create_dir_all(cli_home.join(".gemini")).expect("create the CLI home");
        // Gemini: API-key auth (a base URL alone selects the "gateway" method, which 0.61.0
        // then rejects as "Invalid auth method selected"), no telemetry, no update checks.
        std::fs::write(
            cli_home.join(".gemini/settings.json"),
            r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},"general":{"disableAutoUpdate":true,"disableUpdateNag":true}}"#,
        )
        .expect("write gemini settings");
        // Codex: a provider pointing at the mock over plain HTTPS-less SSE (no WebSocket).
        // Every CLI keeps its own default retries, as a user's does (issue 22): the
        // conductor, not a test setting, must make a refused key or a rate limit fast.
        std::fs::write(
            cli_home.join("config.toml"),
            codex_config(&mock.base_url(), ""),
        )
        .expect("write codex config");
        let base = mock.base_url();
        let home = cli_home.display().to_string();
        let vars = [
            ("HOME", home.as_str()),
            ("CODEX_HOME", home.as_str()),
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("ANTHROPIC_API_KEY", "sk-mock"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("GEMINI_API_KEY", "mock-key"),
            ("GOOGLE_GEMINI_BASE_URL", base.as_str()),
            ("OPENAI_API_KEY", "sk-mock"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
        Some(RealCliEnv {
            env,
            mock,
            cli_home,
            vars,
        })
    }

    /// Set up for `cli` with its variables and start the conductor, or print why the test
    /// is skipped and return `None`.
    pub fn start(cli: &RealCli) -> Option<RealCliEnv> {
        let mut rc = RealCliEnv::new(cli.program)?;
        for (k, v) in cli.vars {
            rc.set_var(k, v);
        }
        rc.start_conductor();
        Some(rc)
    }

    /// [`Self::start`] with the CLIs' own retries capped ([`Self::cap_cli_retries`]).
    pub fn start_capped(cli: &RealCli) -> Option<RealCliEnv> {
        let mut rc = RealCliEnv::new(cli.program)?;
        for (k, v) in cli.vars {
            rc.set_var(k, v);
        }
        rc.cap_cli_retries();
        rc.start_conductor();
        Some(rc)
    }

    /// Cap every CLI's own retries at one (`CLAUDE_CODE_MAX_RETRIES`, Gemini's
    /// `general.maxAttempts`, Codex's `request_max_retries` / `stream_max_retries`), for the
    /// cases about what the conductor does once a CLI has given up; call before
    /// [`Self::start_conductor`]. Every other case runs the CLIs' defaults.
    ///
    /// # Panics
    /// If the CLIs' settings cannot be written.
    #[allow(clippy::expect_used)]
    pub fn cap_cli_retries(&mut self) {
        self.set_var("CLAUDE_CODE_MAX_RETRIES", "1");
        std::fs::write(
            self.cli_home.join(".gemini/settings.json"),
            r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},"general":{"disableAutoUpdate":true,"disableUpdateNag":true,"maxAttempts":2}}"#,
        )
        .expect("write gemini settings");
        std::fs::write(
            self.cli_home.join("config.toml"),
            codex_config(
                &self.mock.base_url(),
                "request_max_retries = 1\nstream_max_retries = 1\n",
            ),
        )
        .expect("write codex config");
    }

    /// Set (or replace) a variable of the conductor's environment.
    pub fn set_var(&mut self, key: &str, value: &str) {
        self.vars.retain(|(k, _)| k != key);
        self.vars.push((key.into(), value.into()));
    }

    /// Start the conductor with [`Self::vars`] (an empty value removes the variable);
    /// panics with its log unless it starts.
    ///
    /// # Panics
    /// If the conductor does not start.
    #[allow(clippy::expect_used)]
    pub fn start_conductor(&self) {
        let out = self
            .env
            .command(&["start"])
            .env_remove("IS_SANDBOX")
            .envs(
                self.vars
                    .iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .output()
            .expect("run mozart start");
        assert!(
            out.status.success(),
            "mozart start failed: {}\n{}\nlog:\n{}",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr),
            self.env.log()
        );
    }

    /// `mozart <args>`.
    pub fn mozart(&self, args: &[&str]) -> Output {
        self.env.mozart(args)
    }

    /// Write a score and submit it to the conductor (`job.submit`, as `mozart run` does,
    /// without waiting); panics unless it is accepted.
    ///
    /// # Panics
    /// If the score is not accepted.
    #[allow(clippy::expect_used)]
    pub fn run_score(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.env.write_score(name, yaml);
        let mut client =
            mozart_ipc::BlockingClient::connect(&self.env.socket).expect("connect to conductor");
        let reply = client
            .call_value(
                "job.submit",
                serde_json::json!({"config_path": path.display().to_string()}),
            )
            .expect("job.submit");
        assert_eq!(reply["status"], "accepted", "submit {name}: {reply:#}");
        path
    }

    /// `mozart status ID --json`.
    ///
    /// # Panics
    /// If the answer is not JSON.
    pub fn status(&self, id: &str) -> Value {
        let out = self.mozart(&["status", id, "--json"]);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("status {id} --json is JSON: {e}: {}", stdout(&out)))
    }

    /// Poll the status until `pred` holds; panics with the status and log after `secs`.
    ///
    /// # Panics
    /// On time-out.
    pub fn wait_for(&self, id: &str, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let doc = self.status(id);
            if pred(&doc) {
                return doc;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting on {id}; last status: {doc:#}\nmock requests: {:#?}\nlog:\n{}",
                self.mock
                    .requests()
                    .iter()
                    .map(|r| format!("{} {} {} -> {}", r.method, r.path, r.scenario, r.status))
                    .collect::<Vec<_>>(),
                self.env.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Wait until the job is in a final state and return its status.
    pub fn wait_done(&self, id: &str, secs: u64) -> Value {
        self.wait_for(id, secs, |d| {
            matches!(
                d["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
        })
    }

    /// `mozart errors ID --json` (or text when that fails to parse).
    pub fn errors_text(&self, id: &str) -> String {
        let out = self.mozart(&["errors", id, "--verbose"]);
        format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr))
    }

    /// Panics with the status and `mozart errors` unless `doc` says completed.
    pub fn assert_completed(&self, id: &str, doc: &Value) {
        assert_eq!(
            doc["status"],
            "completed",
            "{doc:#}\n{}",
            self.errors_text(id)
        );
    }

    /// Two sheets each make the CLI write a file through its own tool: both files are there,
    /// and the tokens (and the CLI's cost estimate, when it makes one) of both turns of both
    /// sheets are counted. Returns the final status.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_two_sheets_write_files(&self, cli: &RealCli) -> Value {
        let name = format!("rc-{}", cli.program);
        let score = write_file_score(&name, &cli.instrument(90), 2, "write", "");
        self.run_score(&name, &score);
        let doc = self.wait_done(&name, 150);
        self.assert_completed(&name, &doc);
        let ws = self.env.work.join(format!("{name}-ws"));
        for n in 1..=2 {
            let text = std::fs::read_to_string(ws.join(format!("out-{n}.txt")));
            assert_eq!(text.ok().as_deref(), Some(FILE_CONTENT), "out-{n}.txt");
        }
        // Two sheets of two API turns each (the tool call, then the answer).
        let cost = &doc["cost"];
        assert_eq!(cost["total_input_tokens"], 2 * 2 * INPUT_TOKENS, "{doc:#}");
        assert_eq!(
            cost["total_output_tokens"],
            2 * 2 * OUTPUT_TOKENS,
            "{doc:#}"
        );
        if cli.reports_cost {
            let usd = cost["total_estimated_cost"].as_f64().unwrap_or(0.0);
            assert!(
                usd > 0.0,
                "the CLI's own cost estimate is recorded: {doc:#}"
            );
        }
        // Issue 22: gemini-cli and codex-cli jobs showed $0.00 with confidence 1.0 and no
        // per-sheet tokens. Each sheet has its tokens and cost, priced from the profile.
        let sheet_usd = cli.priced_at.map(|(i, o)| {
            (2 * INPUT_TOKENS) as f64 * i / 1000.0 + (2 * OUTPUT_TOKENS) as f64 * o / 1000.0
        });
        for n in ["1", "2"] {
            let sheet = &doc["sheets"][n];
            assert_eq!(sheet["input_tokens"], 2 * INPUT_TOKENS, "{doc:#}");
            assert_eq!(sheet["output_tokens"], 2 * OUTPUT_TOKENS, "{doc:#}");
            assert_eq!(sheet["cost_confidence"], cli.cost_confidence, "{doc:#}");
            let usd = sheet["estimated_cost"].as_f64().unwrap_or(0.0);
            assert!(usd > 0.0 || cli.cost_confidence == 0.0, "{doc:#}");
            if let Some(expected) = sheet_usd {
                assert!(
                    (usd - expected).abs() < 1e-9,
                    "sheet {n}: {usd} vs {expected}"
                );
            }
        }
        assert_eq!(cost["cost_confidence"], cli.cost_confidence, "{doc:#}");
        if let Some(expected) = sheet_usd {
            let usd = cost["total_estimated_cost"].as_f64().unwrap_or(0.0);
            assert!((usd - 2.0 * expected).abs() < 1e-9, "{doc:#}");
        }
        assert_eq!(self.mock.requests().len(), 2 * 2, "one request per turn");
        doc
    }

    /// A two-sheet job with `cost_limits.max_cost_per_job` below what one sheet costs: once
    /// sheet 1 has cost more than the limit the job is paused (upstream's cost-limit rule,
    /// execution.md §9.6), `cost.cost_limit_reached` is set, the error names the limit, and
    /// sheet 2 never runs. Returns the final status.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_cost_limit_pauses_the_job(&self, cli: &RealCli) -> Value {
        let limit = "cost_limits: {enabled: true, max_cost_per_job: 0.0001}\n";
        let score = write_file_score("rc-budget", &cli.instrument(90), 2, "write", limit);
        self.run_score("rc-budget", &score);
        let doc = self.wait_for("rc-budget", 120, |d| {
            d["status"] != "running" && d["status"] != "queued" && d["status"] != "pending"
        });
        assert_eq!(doc["status"], "paused", "{doc:#}\n{}", self.env.log());
        assert_eq!(doc["cost"]["cost_limit_reached"], true, "{doc:#}");
        let usd = doc["cost"]["total_estimated_cost"].as_f64().unwrap_or(0.0);
        assert!(usd > 0.0001, "{doc:#}");
        let error = doc["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("Cost limit: job cost $"), "{doc:#}");
        assert_eq!(doc["sheets"]["1"]["status"], "completed", "{doc:#}");
        assert_eq!(doc["sheets"]["2"]["status"], "pending", "{doc:#}");
        let text = stdout(&self.mozart(&["status", "rc-budget"]));
        assert!(text.contains("Cost limit reached"), "{text}");
        // Sheet 2 stays unplayed: only sheet 1's turns reached the API.
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(self.status("rc-budget")["sheets"]["2"]["status"], "pending");
        assert_eq!(self.mock.requests().len(), 2, "one sheet of two turns");
        doc
    }

    /// The API rejects the key (HTTP 401) and the CLI keeps its own retry settings (Claude
    /// Code retries a 401 ten times over ~3 minutes, Codex five times): the conductor stops
    /// the CLI at its first retry, and the sheet fails as an auth error within seconds — one
    /// attempt, though retries are allowed — with a hint naming the key to check.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_bad_key_fails_fast(&self, cli: &RealCli) -> Value {
        let retries = "retry: {max_retries: 3, base_delay_seconds: 1}\n";
        let score = write_file_score("rc-401", &cli.instrument(90), 1, "auth", retries);
        let t0 = Instant::now();
        self.run_score("rc-401", &score);
        let doc = self.wait_done("rc-401", 90);
        let took = t0.elapsed();
        let errors = self.errors_text("rc-401");
        assert_eq!(doc["status"], "failed", "{doc:#}");
        let sheet = &doc["sheets"]["1"];
        assert_eq!(sheet["error_category"], "auth", "{doc:#}\n{errors}");
        let retries = &doc["execution"]["total_retry_count"];
        assert_eq!(retries, 0, "a key is not retried: {doc:#}");
        assert_eq!(sheet["attempt_count"], 1, "the one attempt counts: {doc:#}");
        assert!(
            took < Duration::from_secs(15),
            "failed within seconds, not after the CLI's own retries: {took:?}"
        );
        assert!(
            errors.contains(cli.key_var),
            "a hint names the key: {errors}"
        );
        // One hint, whole: not cut mid-sentence and followed by a second one.
        let message = sheet["error_message"].as_str().unwrap_or_default();
        assert_eq!(
            message.matches("in the conductor's environment").count(),
            1,
            "one whole hint: {message}"
        );
        let refused = self
            .mock
            .requests()
            .iter()
            .filter(|r| r.status == 401)
            .count();
        assert!(
            (1..=3).contains(&refused),
            "the CLI was stopped, not left to send the refused key again and again: {refused} \
             requests"
        );
        doc
    }

    /// The API never answers: the sheet fails at its timeout and no process is left.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_hang_times_out(&self, cli: &RealCli) {
        let once = "retry: {max_retries: 0}\n";
        let score = write_file_score(
            "rc-hang",
            &cli.instrument(cli.hang_timeout),
            1,
            "hang",
            once,
        );
        self.run_score("rc-hang", &score);
        let doc = self.wait_done("rc-hang", 90);
        assert_eq!(doc["status"], "failed", "{doc:#}");
        assert_eq!(doc["sheets"]["1"]["error_category"], "timeout", "{doc:#}");
        assert!(self.mock.requests().iter().any(|r| r.scenario == "hang"));
        assert_no_process(&self.env.work.join("rc-hang-ws"));
    }

    /// `mozart cancel` while the CLI waits on the API leaves no process behind.
    ///
    /// # Panics
    /// When a process is left, or the CLI never called the API.
    pub fn check_cancel_leaves_no_process(&self, cli: &RealCli) {
        let score = write_file_score("rc-cancel", &cli.instrument(120), 1, "hang", "");
        self.run_score("rc-cancel", &score);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.mock.requests().iter().any(|r| r.scenario == "hang") {
            assert!(Instant::now() < deadline, "the CLI never called the API");
            std::thread::sleep(Duration::from_millis(100));
        }
        let ws = self.env.work.join("rc-cancel-ws");
        assert!(
            !processes_mentioning(&ws).is_empty(),
            "the CLI runs in the workspace"
        );
        let out = self.mozart(&["cancel", "rc-cancel"]);
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
        self.wait_done("rc-cancel", 30);
        assert_no_process(&ws);
    }

    /// The API answers 429 with `retry-after: 3` (Gemini: "Please retry in 3s") for `window_ms`
    /// from the first request, then answers normally; the CLI keeps its own retry settings.
    /// Within seconds `mozart status` shows the sheet waiting on a rate limit, in the API's
    /// or CLI's words, with the time left (the conductor stopped the CLI instead of letting
    /// it retry); then the job completes by itself — no `clear-rate-limits` — without
    /// spending an attempt (none is allowed). Returns the final status.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_rate_limit_waited_out(&self, cli: &RealCli, window_ms: u64) -> Value {
        let scenario = format!("ratelimit mock-ms:{window_ms} mock-retry:3");
        let none = "retry: {max_retries: 0}\n";
        let score = write_file_score("rc-429", &cli.instrument(90), 1, &scenario, none);
        let t0 = Instant::now();
        self.run_score("rc-429", &score);
        // Seen in the text view too: the sheet waits, with the API's words and time left.
        let deadline = t0 + Duration::from_secs(25);
        let (seen, text) = loop {
            let doc = self.status("rc-429");
            let text = stdout(&self.mozart(&["status", "rc-429"]));
            if doc["sheets"]["1"]["rate_limit"].is_object() && text.contains("Rate Limit — Sheet 1")
            {
                break (doc, text);
            }
            assert!(
                Instant::now() < deadline
                    && !matches!(doc["status"].as_str(), Some("completed" | "failed")),
                "status never showed the rate limit: {doc:#}\n{text}\nmock: {:?}\nlog:\n{}",
                self.mock
                    .requests()
                    .iter()
                    .map(|r| r.status)
                    .collect::<Vec<_>>(),
                self.env.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let shown = Instant::now();
        let wait = &seen["sheets"]["1"]["rate_limit"];
        let reason = wait["reason"].as_str().unwrap_or_default().to_lowercase();
        assert!(
            ["429", "rate", "exhausted"]
                .iter()
                .any(|w| reason.contains(w)),
            "in the API's or CLI's words: {wait:#}"
        );
        assert!(
            reason.contains("no retry spent"),
            "and what happens: {wait:#}"
        );
        assert!(text.contains("Rate Limit — Sheet 1"), "{text}");
        assert!(
            text.contains("Runs again in") || text.contains("runs again now"),
            "{text}"
        );
        let doc = self.wait_done("rc-429", 150);
        self.assert_completed("rc-429", &doc);
        // The API asked for a few seconds: the job goes on by itself after that wait, not
        // after a default one (5 minutes for a capacity error, an hour for a rate limit).
        // The bound leaves room for a loaded machine, where a CLI's start (and a placed
        // attempt's turn in the Slurm queue, shared with other tests) takes tens of seconds.
        assert!(
            shown.elapsed() < Duration::from_secs(120),
            "the job went on by itself soon after the API recovered: {:?}",
            shown.elapsed()
        );
        let waits = doc["execution"]["rate_limit_waits"].as_u64().unwrap_or(0);
        assert!(waits >= 1, "{doc:#}");
        assert_eq!(doc["execution"]["total_retry_count"], 0, "{doc:#}");
        assert_eq!(doc["sheets"]["1"]["attempt_count"], 1, "{doc:#}");
        assert!(doc["sheets"]["1"].get("rate_limit").is_none(), "{doc:#}");
        assert!(self.mock.requests().iter().any(|r| r.status == 429));
        doc
    }

    /// The API answers "overloaded" (Anthropic 529, others 503) for its first 5 s, and the
    /// CLI keeps its own retries (the right remedy for an overload): while it retries, the
    /// sheet's live progress says the API is overloaded and the CLI retries; the job then
    /// completes without being parked as rate limited.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_overload_shows_in_status(&self, cli: &RealCli) -> Value {
        let retries = "retry: {max_retries: 5, base_delay_seconds: 1, jitter: false}\n";
        let scenario = "overload mock-ms:5000";
        let score = write_file_score("rc-busy", &cli.instrument(90), 1, scenario, retries);
        self.run_score("rc-busy", &score);
        let running = self.wait_for("rc-busy", 60, |d| {
            d["sheets"]["1"]["live"]["last_event"]
                .as_str()
                .is_some_and(|e| e.contains("API overloaded"))
                || matches!(d["status"].as_str(), Some("completed" | "failed"))
        });
        let event = running["sheets"]["1"]["live"]["last_event"]
            .as_str()
            .unwrap_or_default();
        assert!(
            event.contains("the CLI retries by itself"),
            "while it runs: {running:#}"
        );
        self.check_overload_retried("rc-busy")
    }

    /// [`Self::check_rate_limit_waited_out`] with a 4 s window (the macro's common case).
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_rate_limit_default(&self, cli: &RealCli) {
        self.check_rate_limit_waited_out(cli, 4000);
    }

    /// The API cuts its answer mid-stream (the connection closes after half a sentence) for
    /// the first 1.5 s: the attempt fails as a transient error — retried by the CLI or by the
    /// conductor, never parked as a rate limit — and the job completes once the API answers
    /// whole again.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_cut_stream_recovers(&self, cli: &RealCli) {
        let retries = "retry: {max_retries: 5, base_delay_seconds: 1, jitter: false}\n";
        let score = write_file_score(
            "rc-cut",
            &cli.instrument(60),
            1,
            "cut mock-ms:1500",
            retries,
        );
        self.run_score("rc-cut", &score);
        let doc = self.wait_done("rc-cut", 90);
        self.assert_completed("rc-cut", &doc);
        assert_eq!(
            doc["execution"]["rate_limit_waits"], 0,
            "a cut stream is not a rate limit: {doc:#}"
        );
        let requests = self.mock.requests();
        let cut = requests
            .iter()
            .filter(|r| r.scenario == "cut" && r.status == 0)
            .count();
        assert!(cut >= 1, "the mock cut at least one answer: {requests:#?}");
        assert!(requests.iter().any(|r| r.status == 200), "{requests:#?}");
    }

    /// Submit `name`: `sheets` sheets whose API answers "overloaded" (Anthropic 529, others
    /// 503) for their first 2.5 s, with retries allowed (1 s apart).
    pub fn run_overloaded(&self, cli: &RealCli, name: &str, sheets: u32) {
        let retries = "retry: {max_retries: 5, base_delay_seconds: 1, jitter: false}\n";
        let scenario = "overload mock-ms:2500";
        let score = write_file_score(name, &cli.instrument(90), sheets, scenario, retries);
        self.run_score(name, &score);
    }

    /// The job of [`Self::run_overloaded`] completes within a minute, retried (by the CLI or
    /// the conductor) and never parked as rate limited. Returns the final status.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_overload_retried(&self, name: &str) -> Value {
        let doc = self.wait_done(name, 60);
        self.assert_completed(name, &doc);
        assert_eq!(
            doc["execution"]["rate_limit_waits"], 0,
            "not parked: {doc:#}"
        );
        let statuses: Vec<u16> = self.mock.requests().iter().map(|r| r.status).collect();
        assert!(
            statuses.iter().any(|s| *s == 503 || *s == 529),
            "{statuses:?}"
        );
        assert!(statuses.contains(&200), "{statuses:?}");
        doc
    }

    /// The API answers 404 "model not found" (in its own words): the CLI exits 1 saying so,
    /// and `mozart errors` shows that cause (`expected`), not only "exit code 1"; with the
    /// default retries the sheet fails at its first attempt (E301: retrying a model the API
    /// does not know cannot help; it spent three attempts and ~45 s).
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_failure_names_its_cause(&self, cli: &RealCli, expected: &str) {
        let score = write_file_score("rc-crash", &cli.instrument(60), 1, "badmodel", "");
        self.run_score("rc-crash", &score);
        let doc = self.wait_done("rc-crash", 90);
        assert_eq!(doc["status"], "failed", "{doc:#}");
        assert_eq!(
            doc["sheets"]["1"]["attempt_count"], 1,
            "not retried: {doc:#}"
        );
        assert_eq!(doc["sheets"]["1"]["error_code"], "E301", "{doc:#}");
        let out = self.mozart(&["errors", "rc-crash", "--json"]);
        let errors: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("errors --json is JSON: {e}: {}", stdout(&out)));
        let messages: Vec<&str> = errors["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["error_message"].as_str())
            .collect();
        assert!(
            messages.iter().any(|m| m.contains(expected)),
            "the cause, not just the exit code: {messages:#?}"
        );
        let sheet = doc["sheets"]["1"]["error_message"]
            .as_str()
            .unwrap_or_default();
        assert!(sheet.contains(expected), "{doc:#}");
    }

    /// A sheet whose first turn calls the CLI's file-writing tool at once and whose answer
    /// then streams for ~4 s, watched by `mozart logs --follow`. While it streams, `status
    /// --json` shows the tool call (`sheets.1.live.last_tool` = `tool`) and `mozart status`
    /// says so; once done the live part is gone and the follower saw the tool call.
    ///
    /// # Panics
    /// When any of it is not so.
    #[allow(clippy::expect_used)]
    pub fn check_live_progress(&self, cli: &RealCli, tool: &str) -> LiveProgress {
        let score = write_file_score("rc-live", &cli.instrument(60), 1, "slow mock-ms:1000", "");
        // `logs --follow` streams from the conductor: the instrument's progress as it happens.
        let follower = self
            .env
            .command(&["logs", "rc-live", "--follow"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn mozart logs --follow");
        std::thread::sleep(Duration::from_millis(300));
        self.run_score("rc-live", &score);
        let running = self.wait_for("rc-live", 60, |d| {
            d["sheets"]["1"]["live"]["tool_calls"].as_u64().unwrap_or(0) >= 1
                || d["status"] != "running" && d["status"] != "queued"
        });
        assert_eq!(
            running["status"], "running",
            "seen before the end: {running:#}"
        );
        assert_eq!(
            running["sheets"]["1"]["live"]["last_tool"], tool,
            "{running:#}"
        );
        let status_text = stdout(&self.mozart(&["status", "rc-live"]));
        let line = format!("Tool calls: 1 (last: {tool})");
        assert!(status_text.contains(&line), "{status_text}");
        let done = self.wait_done("rc-live", 60);
        self.assert_completed("rc-live", &done);
        assert!(
            done["sheets"]["1"].get("live").is_none(),
            "gone once done: {done:#}"
        );
        std::thread::sleep(Duration::from_millis(700));
        crate::signal(follower.id(), "INT");
        let out = follower.wait_with_output().expect("wait for logs --follow");
        let followed = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{followed}");
        for expected in [
            "Following the conductor's log for score 'rc-live'".to_string(),
            format!("sheet 1: 1 tool call (last: {tool})"),
            "Stopped following logs.".to_string(),
        ] {
            assert!(followed.contains(&expected), "{followed}");
        }
        LiveProgress {
            running,
            status_text,
            done,
        }
    }
}

/// What [`RealCliEnv::check_live_progress`] saw.
#[derive(Debug)]
pub struct LiveProgress {
    /// `status --json` while the CLI streamed.
    pub running: Value,
    /// `mozart status` then.
    pub status_text: String,
    /// `status --json` at the end.
    pub done: Value,
}

/// Codex's `config.toml`: the mock as its model provider, with `extra` provider settings.
fn codex_config(base_url: &str, extra: &str) -> String {
    format!(
        "model = \"gpt-mock\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"{base_url}/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\nsupports_websockets = false\n{extra}"
    )
}

/// The tests every real CLI passes alike, for the [`RealCli`] `$cli`; each skips with a
/// printed reason when the CLI is not installed.
#[macro_export]
macro_rules! real_cli_tests {
    ($cli:expr) => {
        $crate::real_cli_tests!(@each $cli,
            two_sheets_write_files_and_report_tokens => check_two_sheets_write_files,
            a_bad_api_key_fails_fast_with_a_hint => check_bad_key_fails_fast,
            a_429_stops_the_cli_shows_in_status_and_ends_on_time => check_rate_limit_default,
            an_overload_is_the_clis_to_retry_and_shows_in_status => check_overload_shows_in_status,
            a_hang_hits_the_timeout_and_leaves_no_process => check_hang_times_out,
            a_stream_cut_mid_answer_is_retried_and_the_job_completes => check_cut_stream_recovers,
            cancel_leaves_no_process => check_cancel_leaves_no_process,
            a_low_cost_limit_pauses_the_job => check_cost_limit_pauses_the_job);
    };
    (@each $cli:expr, $($test:ident => $check:ident),*) => {
        $(
            #[test]
            fn $test() {
                if let Some(rc) = $crate::real_cli::RealCliEnv::start(&$cli) {
                    rc.$check(&$cli);
                }
            }
        )*
    };
}

/// A score of `sheets` sheets on `instrument`, each of which asks the CLI (through the mock's
/// scripted `scenario`) to write `out-N.txt` in the workspace, which a validation checks.
pub fn write_file_score(
    name: &str,
    instrument_block: &str,
    sheets: u32,
    scenario: &str,
    extra: &str,
) -> String {
    format!(
        r#"name: {name}
workspace: ./{name}-ws
{instrument_block}
pause_between_sheets_seconds: 0
sheet:
  size: 1
  total_items: {sheets}
prompt:
  template: |
    Write the file for sheet {{{{ sheet_num }}}}.
    mock-scenario:{scenario} mock-key:{name}-{{{{ sheet_num }}}} mock-file:{{{{ workspace }}}}/out-{{{{ sheet_num }}}}.txt
validations:
  - type: file_exists
    path: "{{workspace}}/out-{{sheet_num}}.txt"
{extra}"#
    )
}

/// Node / CLI processes whose command line mentions `needle` (a workspace path).
pub fn processes_mentioning(needle: &Path) -> Vec<(u32, String)> {
    let needle = needle.display().to_string();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let cwd = std::fs::read_link(e.path().join("cwd")).unwrap_or_default();
        if (cmd.contains(&needle) || cwd.starts_with(&needle)) && crate::alive(pid) {
            found.push((pid, cmd));
        }
    }
    found
}

/// Waits up to 10 s for every process mentioning `ws` to be gone; fails naming the ones left.
pub fn assert_no_process(ws: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_mentioning(ws);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "orphan processes: {left:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
