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
    /// The instrument of the scores.
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
}

/// Claude Code on the `claude_cli` instrument (stream-json, so progress is live).
pub const CLAUDE: RealCli = RealCli {
    program: "claude",
    instrument: "claude_cli",
    backend: "\n  output_format: stream-json",
    // As root the CLI refuses to skip permissions unless told it runs in a sandbox.
    vars: &[("IS_SANDBOX", "1")],
    key_var: "ANTHROPIC_API_KEY",
    hang_timeout: 4,
    reports_cost: true,
};

/// Gemini CLI on the `gemini-cli` profile.
pub const GEMINI: RealCli = RealCli {
    program: "gemini",
    instrument: "gemini-cli",
    backend: "",
    vars: &[],
    key_var: "GEMINI_API_KEY",
    hang_timeout: 12,
    reports_cost: false,
};

/// Codex CLI on the `codex-cli` profile.
pub const CODEX: RealCli = RealCli {
    program: "codex",
    instrument: "codex-cli",
    backend: "",
    vars: &[],
    key_var: "OPENAI_API_KEY",
    hang_timeout: 8,
    reports_cost: false,
};

impl RealCli {
    /// The score lines choosing this instrument with a sheet timeout of `timeout` seconds.
    pub fn instrument(&self, timeout: u32) -> String {
        format!(
            "instrument: {}\nbackend:\n  timeout_seconds: {timeout}{}",
            self.instrument, self.backend
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
            r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},"general":{"disableAutoUpdate":true,"disableUpdateNag":true,"maxAttempts":2}}"#,
        )
        .expect("write gemini settings");
        // Codex: a provider pointing at the mock over plain HTTPS-less SSE (no WebSocket).
        std::fs::write(
            cli_home.join("config.toml"),
            format!(
                "model = \"gpt-mock\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"{}/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\nsupports_websockets = false\nrequest_max_retries = 1\nstream_max_retries = 1\n",
                mock.base_url()
            ),
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
            ("CLAUDE_CODE_MAX_RETRIES", "1"),
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
        assert_eq!(self.mock.requests().len(), 2 * 2, "one request per turn");
        doc
    }

    /// The API rejects the key: the sheet fails at once (one attempt, though retries are
    /// allowed) as an auth error, and `mozart errors` names the key to check.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_bad_key_fails_fast(&self, cli: &RealCli) -> Value {
        let retries = "retry: {max_retries: 3, base_delay_seconds: 1}\n";
        let score = write_file_score("rc-401", &cli.instrument(90), 1, "auth", retries);
        let t0 = Instant::now();
        self.run_score("rc-401", &score);
        let doc = self.wait_done("rc-401", 90);
        let errors = self.errors_text("rc-401");
        assert_eq!(doc["status"], "failed", "{doc:#}");
        let sheet = &doc["sheets"]["1"];
        assert_eq!(sheet["error_category"], "auth", "{doc:#}\n{errors}");
        let retries = &doc["execution"]["total_retry_count"];
        assert_eq!(retries, 0, "a key is not retried: {doc:#}");
        assert_eq!(sheet["attempt_count"], 1, "the one attempt counts: {doc:#}");
        assert!(t0.elapsed() < Duration::from_secs(60));
        assert!(
            errors.contains(cli.key_var),
            "a hint names the key: {errors}"
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

    /// The API answers 429 for `window_ms` from the first request: the job completes after
    /// the window without spending a retry (none is allowed), having waited the limit out.
    /// Returns the final status.
    ///
    /// # Panics
    /// When any of it is not so.
    pub fn check_rate_limit_waited_out(&self, cli: &RealCli, window_ms: u64) -> Value {
        let scenario = format!("ratelimit mock-ms:{window_ms}");
        let none = "retry: {max_retries: 0}\n";
        let score = write_file_score("rc-429", &cli.instrument(90), 1, &scenario, none);
        self.run_score("rc-429", &score);
        let doc = self.wait_done("rc-429", 120);
        self.assert_completed("rc-429", &doc);
        let waits = doc["execution"]["rate_limit_waits"].as_u64().unwrap_or(0);
        assert!(waits >= 1, "{doc:#}");
        assert_eq!(doc["execution"]["total_retry_count"], 0, "{doc:#}");
        assert!(self.mock.requests().iter().any(|r| r.status == 429));
        doc
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
            format!("sheet 1: 1 tool call(s) (last: {tool})"),
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

/// The tests every real CLI passes alike, for the [`RealCli`] `$cli`; each skips with a
/// printed reason when the CLI is not installed.
#[macro_export]
macro_rules! real_cli_tests {
    ($cli:expr) => {
        $crate::real_cli_tests!(@each $cli,
            two_sheets_write_files_and_report_tokens => check_two_sheets_write_files,
            a_bad_api_key_fails_fast_with_a_hint => check_bad_key_fails_fast,
            a_hang_hits_the_timeout_and_leaves_no_process => check_hang_times_out,
            a_stream_cut_mid_answer_is_retried_and_the_job_completes => check_cut_stream_recovers,
            cancel_leaves_no_process => check_cancel_leaves_no_process);
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
