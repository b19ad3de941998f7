//! Running the real AI CLIs (installed by `tests/real-cli/setup.sh`) under a real conductor
//! against [`crate::mock_api::MockApi`] (issue 13).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::mock_api::MockApi;
use crate::{stdout, TestEnv};

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
            eprintln!(
                "SKIPPED: the real `{cli}` CLI is not installed in {} (run tests/real-cli/setup.sh)",
                real_cli_bin_dir().display()
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
