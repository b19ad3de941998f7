//! `mozart-standin`: a stand-in AI CLI for tests (claude-code-output.md §9).
//!
//! Copy or symlink it as `claude`, `gemini` or `codex`; the name it is invoked under picks
//! the flavour (override with `MOZART_STANDIN_FLAVOR=claude|gemini|codex|text`). It accepts
//! the real flags of each CLI and prints their output formats:
//! * claude: `--output-format text|json|stream-json` (stream-json needs `--verbose`, as the
//!   real CLI does); the prompt is the positional argument and/or stdin.
//! * gemini: `-o json` → `{"response", "stats": {"models": {...}}}`; the prompt is `-p`'s
//!   value and/or stdin.
//! * codex: `exec --json` → JSONL events ending in `item.completed` / `turn.completed`; the
//!   prompt is the positional argument, or stdin when it is `-` or absent.
//! * text (any other name): prints the answer as text.
//!
//! Every `RUN: <command>` line of the prompt runs through `sh -ec` in the current directory
//! (its output goes to stderr); a failing command makes the run fail with exit 1.
//!
//! ## Script
//! `MOZART_STANDIN_SCRIPT=/path/script.json` holds a JSON **list** of steps; invocation N
//! (counted in `/path/script.json.count`) uses step N, the last step repeating. A step is
//! an object, every key optional:
//!
//! | key | meaning |
//! |---|---|
//! | `scenario` | `ok` (default), `error`, `limit-event`, `limit-text`, `limit-legacy`, `limit-weekly`, `warning`, `overloaded`, `auth`, `max-turns`, `stale-resume`, `hang`, `signal`, `flood`, `grandchild`, `linger`, `empty` |
//! | `result` | the answer text (default `standin: ok`) |
//! | `files` | `{"relative/path": "content"}` written before answering |
//! | `run` | a shell command (`sh -ec`) run in the working directory after `files` |
//! | `exit` | exit code override |
//! | `stdout` / `stderr` | extra raw text printed first |
//! | `sleep` | seconds to sleep before answering |
//! | `reset_in` | seconds until the limit resets (limit scenarios; default 3600) |
//! | `signal` | `SEGV`, `KILL`, `TERM`, `ABRT`… for `scenario: signal` (default `SEGV`) |
//! | `mb` | megabytes printed to stdout for `flood` (default 100) |
//! | `child_sleep` | seconds the grandchild sleeps for `grandchild` (default 300) |
//! | `linger` | seconds to stay alive after the result for `linger` (default 20) |
//! | `input_tokens` / `output_tokens` / `cost` | usage numbers reported |
//!
//! **Routes by prompt**: the script may instead be an object `{"routes": [{"contains":
//! ["text", …], "steps": [step, …]}, …]}`: the first route whose every `contains` text is in
//! the prompt plays its own list of steps (counted per route, the last repeating), so parallel
//! callers with different prompts — a worker and a reviewer, say — each follow their own
//! script. A prompt no route matches gets the default `ok` step.
//!
//! `--version` as the only argument prints a version line and exits 0.
//!
//! `hang` sleeps `sleep` seconds (default 3600) without output. `grandchild` starts
//! `sh -c 'sleep N'` (sharing stdout) and answers at once. Without a script every
//! invocation is `ok`.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

#[derive(Clone, Copy, PartialEq)]
enum Flavor {
    Claude,
    Gemini,
    Codex,
    Text,
}

struct Invocation {
    flavor: Flavor,
    prompt: String,
    format: String,
    verbose: bool,
    model: Option<String>,
    resume: Option<String>,
}

fn main() {
    let code = match run() {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("{msg}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

fn flavor() -> Flavor {
    let name = std::env::var("MOZART_STANDIN_FLAVOR")
        .ok()
        .unwrap_or_else(|| {
            std::env::args()
                .next()
                .map(|a| {
                    Path::new(&a)
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default()
                })
                .unwrap_or_default()
        });
    if name.contains("gemini") {
        Flavor::Gemini
    } else if name.contains("codex") {
        Flavor::Codex
    } else if name.contains("claude") || name == "mozart-standin" {
        Flavor::Claude
    } else {
        Flavor::Text
    }
}

fn parse_args(flavor: Flavor) -> Result<Invocation, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (valued, boolean): (&[&str], &[&str]) = match flavor {
        Flavor::Claude => (
            &[
                "--output-format",
                "--model",
                "--allowedTools",
                "--allowed-tools",
                "--disallowedTools",
                "--system-prompt",
                "--system-prompt-file",
                "--append-system-prompt",
                "--mcp-config",
                "--resume",
                "-r",
                "--session-id",
                "--max-turns",
                "--permission-mode",
                "--input-format",
                "--fallback-model",
                "--max-budget-usd",
                "--add-dir",
            ],
            &[
                "-p",
                "--print",
                "--verbose",
                "--dangerously-skip-permissions",
                "--strict-mcp-config",
                "--include-partial-messages",
                "--continue",
                "-c",
                "--fork-session",
                "--no-session-persistence",
            ],
        ),
        Flavor::Gemini => (
            &["-m", "--model", "-o", "--output-format", "-p", "--prompt"],
            // --skip-trust: Gemini CLI 0.61 (issue 13).
            &["--yolo", "-y", "--debug", "--skip-trust"],
        ),
        Flavor::Codex => (
            // Codex 0.169 has --sandbox MODE and no longer --full-auto (issue 13).
            &["--model", "-m", "--sandbox", "-s"],
            &["--full-auto", "--json", "--skip-git-repo-check"],
        ),
        Flavor::Text => (&[], &[]),
    };
    let mut inv = Invocation {
        flavor,
        prompt: String::new(),
        format: "text".into(),
        verbose: false,
        model: None,
        resume: None,
    };
    let mut positional = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if flavor == Flavor::Codex && i == 0 && a == "exec" {
            i += 1;
            continue;
        }
        if valued.contains(&a) {
            let v = args
                .get(i + 1)
                .cloned()
                .ok_or_else(|| format!("error: option '{a}' argument missing"))?;
            match a {
                "--output-format" | "-o" => inv.format = v,
                "--model" | "-m" => inv.model = Some(v),
                "--resume" | "-r" => inv.resume = Some(v),
                "-p" | "--prompt" => positional.push(v),
                _ => {}
            }
            i += 2;
            continue;
        }
        if boolean.contains(&a) {
            match a {
                "--verbose" => inv.verbose = true,
                "--json" => inv.format = "json".into(),
                _ => {}
            }
        } else if a == "-" && flavor == Flavor::Codex {
            // `codex exec -`: the prompt is on stdin (read below).
        } else if a.starts_with('-') && a.len() > 1 && flavor != Flavor::Text {
            return Err(format!("error: unknown option '{a}'"));
        } else {
            positional.push(a.to_string());
        }
        i += 1;
    }
    if flavor == Flavor::Text {
        // Like mozart-instant: the prompt is the last argument.
        positional = positional.pop().into_iter().collect();
    }
    let mut stdin_text = String::new();
    if !std::io::stdin().is_terminal() {
        let _ = std::io::stdin().read_to_string(&mut stdin_text);
    }
    let mut parts: Vec<String> = positional;
    if !stdin_text.is_empty() {
        parts.push(stdin_text);
    }
    inv.prompt = parts.join("\n");
    Ok(inv)
}

fn load_step(prompt: &str) -> Result<Map<String, Value>, String> {
    let Ok(path) = std::env::var("MOZART_STANDIN_SCRIPT") else {
        return Ok(Map::new());
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("mozart-standin: cannot read script {path}: {e}"))?;
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| format!("mozart-standin: script {path} is not JSON: {e}"))?;
    let (path, steps): (String, Vec<Value>) = match doc {
        Value::Array(steps) => (path, steps),
        Value::Object(obj) => {
            let routes = obj
                .get("routes")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let found = routes.iter().enumerate().find(|(_, r)| {
                r.get("contains")
                    .and_then(Value::as_array)
                    .is_some_and(|texts| {
                        texts
                            .iter()
                            .all(|t| t.as_str().is_some_and(|t| prompt.contains(t)))
                    })
            });
            match found {
                Some((i, r)) => (
                    format!("{path}.route{i}"),
                    r.get("steps")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                ),
                None => return Ok(Map::new()),
            }
        }
        _ => {
            return Err(format!(
                "mozart-standin: script {path} is not a JSON list or object"
            ))
        }
    };
    // Claim the invocation number atomically (parallel sheets call the stand-in at once):
    // the first `{path}.claim.N` this process manages to create is its number.
    let mut n = 0usize;
    loop {
        let claim = PathBuf::from(format!("{path}.claim.{n}"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&claim)
        {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => {
                return Err(format!(
                    "mozart-standin: cannot claim {}: {e}",
                    claim.display()
                ))
            }
        }
    }
    // `{path}.count`: how many invocations so far (read by tests).
    let counter = PathBuf::from(format!("{path}.count"));
    let seen: usize = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    std::fs::write(&counter, seen.max(n + 1).to_string())
        .map_err(|e| format!("mozart-standin: cannot write {}: {e}", counter.display()))?;
    match steps.get(n).or(steps.last()) {
        Some(Value::Object(step)) => Ok(step.clone()),
        Some(_) => Err(format!(
            "mozart-standin: step {n} of {path} is not an object"
        )),
        None => Ok(Map::new()),
    }
}

fn now_epoch() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn session_id() -> String {
    let n = now_epoch() ^ (u64::from(std::process::id()) << 20);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        n as u32,
        (n >> 32) as u16,
        n % 0xfff,
        (n >> 12) % 0xfff,
        n
    )
}

/// `H[:MM]am|pm` of an epoch instant, in UTC.
fn clock_text(epoch: u64) -> String {
    let secs = epoch % 86_400;
    let (h, m) = (secs / 3600, (secs % 3600) / 60);
    let (h12, ampm) = match h {
        0 => (12, "am"),
        1..=11 => (h, "am"),
        12 => (12, "pm"),
        _ => (h - 12, "pm"),
    };
    if m == 0 {
        format!("{h12}{ampm}")
    } else {
        format!("{h12}:{m:02}{ampm}")
    }
}

fn str_of<'a>(step: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    step.get(key).and_then(Value::as_str)
}

fn num_of(step: &Map<String, Value>, key: &str) -> Option<f64> {
    step.get(key).and_then(Value::as_f64)
}

fn run_lines(prompt: &str) -> Result<(), String> {
    let script: Vec<&str> = prompt
        .lines()
        .filter_map(|l| l.strip_prefix("RUN: "))
        .collect();
    if script.is_empty() {
        return Ok(());
    }
    let status = Command::new("sh")
        .arg("-ec")
        .arg(script.join("\n"))
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("RUN step failed ({status})"))
    }
}

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

fn run() -> Result<i32, String> {
    let flavor = flavor();
    if std::env::args().nth(1).as_deref() == Some("--version") {
        out(match flavor {
            Flavor::Claude => "2.1.220 (Claude Code) [mozart-standin]",
            Flavor::Gemini => "0.9.0 [mozart-standin]",
            Flavor::Codex => "codex-cli 0.40.0 [mozart-standin]",
            Flavor::Text => "mozart-standin",
        });
        return Ok(0);
    }
    let inv = parse_args(flavor)?;
    if flavor == Flavor::Claude {
        if std::env::var_os("CLAUDECODE").is_some() {
            eprintln!("Error: Claude Code cannot be launched inside another Claude Code session.");
            eprintln!(
                "Nested sessions share runtime resources and will crash all active sessions."
            );
            eprintln!("To bypass this check, unset the CLAUDECODE environment variable.");
            return Ok(1);
        }
        if inv.format == "stream-json" && !inv.verbose {
            eprintln!("Error: When using --print, --output-format=stream-json requires --verbose");
            return Ok(1);
        }
        if inv.prompt.trim().is_empty() {
            eprintln!("Error: Input must be provided either through stdin or as a prompt argument when using --print");
            return Ok(1);
        }
    }
    let step = load_step(&inv.prompt)?;
    if let Some(files) = step.get("files").and_then(Value::as_object) {
        for (path, content) in files {
            let path = Path::new(path);
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            let text = content
                .as_str()
                .map_or_else(|| content.to_string(), str::to_string);
            std::fs::write(path, text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
    }
    if let Some(cmd) = str_of(&step, "run") {
        // What an agent would do with its shell tool: run a command in the working directory.
        let status = Command::new("sh")
            .arg("-ec")
            .arg(cmd)
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run step command: {e}"))?;
        if !status.success() {
            return Err(format!("step command failed: {cmd}"));
        }
    }
    if let Some(text) = str_of(&step, "stdout") {
        print!("{text}");
    }
    if let Some(text) = str_of(&step, "stderr") {
        eprint!("{text}");
    }
    let scenario = str_of(&step, "scenario").unwrap_or("ok").to_string();
    let sleep = num_of(&step, "sleep");
    if scenario != "hang" {
        if let Some(s) = sleep {
            std::thread::sleep(Duration::from_secs_f64(s));
        }
    }
    let ctx = Ctx {
        inv: &inv,
        step: &step,
        session: session_id(),
    };
    let code = match scenario.as_str() {
        "ok" | "warning" | "overloaded" | "grandchild" | "linger" => {
            if scenario == "grandchild" {
                let secs = num_of(&step, "child_sleep").unwrap_or(300.0);
                Command::new("sh")
                    .arg("-c")
                    .arg(format!("sleep {secs}"))
                    .spawn()
                    .map_err(|e| format!("cannot spawn grandchild: {e}"))?;
            }
            match run_lines(&inv.prompt) {
                Ok(()) => ctx.answer(&scenario),
                Err(msg) => ctx.fail(&msg, "error_during_execution", None),
            }
        }
        "error" => ctx.fail(
            str_of(&step, "result").unwrap_or("Execution error"),
            "success",
            None,
        ),
        "auth" => ctx.fail("Invalid API key · Please run /login", "success", Some(401)),
        "max-turns" => ctx.fail_errors("error_max_turns", "Reached maximum number of turns (1)"),
        "stale-resume" => {
            let id = inv.resume.clone().unwrap_or_else(|| "unknown".into());
            let msg = format!("No conversation found with session ID: {id}");
            eprintln!("{msg}");
            ctx.fail_errors("error_during_execution", &msg)
        }
        "limit-event" | "limit-text" | "limit-legacy" | "limit-weekly" => ctx.limit(&scenario),
        "hang" => {
            std::thread::sleep(Duration::from_secs_f64(sleep.unwrap_or(3600.0)));
            0
        }
        "signal" => {
            let sig = str_of(&step, "signal").unwrap_or("SEGV");
            // Rust's runtime handles SIGSEGV/SIGBUS once (guard-page check) before the default
            // action applies, so the signal is sent until it takes.
            for _ in 0..10 {
                let _ = Command::new("kill")
                    .args(["-s", sig, &std::process::id().to_string()])
                    .status();
                std::thread::sleep(Duration::from_millis(200));
            }
            return Err(format!(
                "mozart-standin: signal {sig} did not end the process"
            ));
        }
        "flood" => {
            let mb = num_of(&step, "mb").unwrap_or(100.0);
            let line = format!("{}\n", "x".repeat(1023));
            let mut stdout = std::io::stdout().lock();
            for _ in 0..(mb * 1024.0) as u64 {
                stdout
                    .write_all(line.as_bytes())
                    .map_err(|e| format!("write: {e}"))?;
            }
            drop(stdout);
            ctx.answer("ok")
        }
        "empty" => 0,
        other => return Err(format!("mozart-standin: unknown scenario '{other}'")),
    };
    let code = step
        .get("exit")
        .and_then(Value::as_i64)
        .map_or(code, |c| c as i32);
    if scenario == "linger" {
        let _ = std::io::stdout().flush();
        std::thread::sleep(Duration::from_secs_f64(
            num_of(&step, "linger").unwrap_or(20.0),
        ));
    }
    Ok(code)
}

struct Ctx<'a> {
    inv: &'a Invocation,
    step: &'a Map<String, Value>,
    session: String,
}

impl Ctx<'_> {
    fn model(&self) -> String {
        self.inv
            .model
            .clone()
            .unwrap_or_else(|| match self.inv.flavor {
                Flavor::Gemini => "gemini-2.5-pro".into(),
                Flavor::Codex => "o4-mini".into(),
                _ => "claude-sonnet-4-5-20250929".into(),
            })
    }

    fn usage(&self) -> (u64, u64, f64) {
        let input = num_of(self.step, "input_tokens")
            .map_or(self.inv.prompt.len() as u64 / 4 + 1, |n| n as u64);
        let output = num_of(self.step, "output_tokens").map_or(7, |n| n as u64);
        let cost = num_of(self.step, "cost").unwrap_or(0.0123);
        (input, output, cost)
    }

    fn init(&self) {
        out(&json!({"type": "system", "subtype": "init", "cwd": std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
            "session_id": self.session, "tools": ["Bash", "Edit", "Read"], "mcp_servers": [], "model": self.model(),
            "permissionMode": "bypassPermissions", "apiKeySource": "none", "claude_code_version": "2.1.220-standin", "uuid": session_id()}).to_string());
    }

    fn result_event(
        &self,
        is_error: bool,
        subtype: &str,
        result: Option<&str>,
        errors: Option<&str>,
        api_status: Option<u16>,
        paid: bool,
    ) -> Value {
        let (input, output, cost) = if paid { self.usage() } else { (0, 0, 0.0) };
        let mut ev = json!({"type": "result", "subtype": subtype, "is_error": is_error, "duration_ms": 1234, "duration_api_ms": 1000,
            "num_turns": if paid { 2 } else { 1 }, "session_id": self.session, "total_cost_usd": cost,
            "usage": {"input_tokens": input, "output_tokens": output, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
            "modelUsage": {self.model(): {"inputTokens": input, "outputTokens": output, "costUSD": cost}},
            "permission_denials": [], "uuid": session_id()});
        if let Some(obj) = ev.as_object_mut() {
            if let Some(r) = result {
                obj.insert("result".into(), json!(r));
            }
            if let Some(e) = errors {
                obj.insert("errors".into(), json!([e]));
            }
            if let Some(s) = api_status {
                obj.insert("api_error_status".into(), json!(s));
                obj.insert("terminal_reason".into(), json!("api_error"));
            } else {
                obj.insert(
                    "terminal_reason".into(),
                    json!(if is_error { "model_error" } else { "completed" }),
                );
            }
        }
        ev
    }

    fn answer(&self, scenario: &str) -> i32 {
        let text = str_of(self.step, "result")
            .unwrap_or("standin: ok")
            .to_string();
        match (self.inv.flavor, self.inv.format.as_str()) {
            (Flavor::Claude, "json") => {
                out(&self
                    .result_event(false, "success", Some(&text), None, None, true)
                    .to_string());
            }
            (Flavor::Claude, "stream-json") => {
                self.init();
                if scenario == "warning" {
                    out(&json!({"type": "rate_limit_event", "rate_limit_info": {"status": "allowed_warning", "resetsAt": now_epoch() + 3600,
                        "rateLimitType": "five_hour", "utilization": 0.92, "surpassedThreshold": 0.9}, "session_id": self.session}).to_string());
                }
                if scenario == "overloaded" {
                    for attempt in 1..=3 {
                        out(&json!({"type": "system", "subtype": "api_retry", "attempt": attempt, "max_retries": 10, "retry_delay_ms": 10,
                            "error_status": 529, "error": "overloaded", "session_id": self.session}).to_string());
                    }
                }
                out(&json!({"type": "assistant", "message": {"id": "msg_standin", "type": "message", "role": "assistant", "model": self.model(),
                    "content": [{"type": "text", "text": text}], "stop_reason": null, "usage": {"input_tokens": 2, "output_tokens": 5}},
                    "parent_tool_use_id": null, "session_id": self.session}).to_string());
                out(&self
                    .result_event(false, "success", Some(&text), None, None, true)
                    .to_string());
            }
            (Flavor::Gemini, "json") => {
                let (input, output, _) = self.usage();
                out(&json!({"response": text, "stats": {"models": {self.model(): {"tokens": {"prompt": input, "candidates": output, "total": input + output}}}}}).to_string());
            }
            (Flavor::Codex, "json") => {
                let (input, output, _) = self.usage();
                out(&json!({"type": "thread.started", "thread_id": self.session}).to_string());
                out(&json!({"type": "turn.started"}).to_string());
                out(&json!({"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "thinking"}}).to_string());
                out(&json!({"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": text}}).to_string());
                out(&json!({"type": "turn.completed", "usage": {"input_tokens": input, "cached_input_tokens": 0, "output_tokens": output}}).to_string());
            }
            _ => out(&text),
        }
        0
    }

    /// An API-level failure reported in the result (stdout), exit 1.
    fn fail(&self, text: &str, subtype: &str, api_status: Option<u16>) -> i32 {
        match (self.inv.flavor, self.inv.format.as_str()) {
            (Flavor::Claude, "json") => out(&self
                .result_event(true, subtype, Some(text), None, api_status, false)
                .to_string()),
            (Flavor::Claude, "stream-json") => {
                self.init();
                out(&self
                    .result_event(true, subtype, Some(text), None, api_status, false)
                    .to_string());
            }
            (Flavor::Gemini, "json") => {
                out(&json!({"error": {"type": "Error", "message": text, "code": 1}}).to_string())
            }
            (Flavor::Codex, "json") => out(&json!({"type": "error", "message": text}).to_string()),
            _ => out(text),
        }
        1
    }

    /// Error subtypes carry `errors[]` and no `result` (claude-code-output.md §4).
    fn fail_errors(&self, subtype: &str, message: &str) -> i32 {
        match (self.inv.flavor, self.inv.format.as_str()) {
            (Flavor::Claude, "json") => out(&self
                .result_event(true, subtype, None, Some(message), None, false)
                .to_string()),
            (Flavor::Claude, "stream-json") => {
                self.init();
                out(&self
                    .result_event(true, subtype, None, Some(message), None, false)
                    .to_string());
            }
            (Flavor::Claude, _) if subtype == "error_max_turns" => {
                out("Error: Reached max turns (1)")
            }
            (Flavor::Claude, _) => out("Execution error"),
            _ => out(message),
        }
        1
    }

    fn limit(&self, scenario: &str) -> i32 {
        let reset = now_epoch() + num_of(self.step, "reset_in").map_or(3600, |s| s as u64);
        let text = match scenario {
            "limit-legacy" => format!("Claude AI usage limit reached|{reset}"),
            "limit-weekly" => {
                "You've hit your weekly limit · resets Aug 5, 7am (America/New_York)".to_string()
            }
            _ => format!(
                "You've hit your session limit · resets {} (UTC)",
                clock_text(reset)
            ),
        };
        match (self.inv.flavor, self.inv.format.as_str(), scenario) {
            (Flavor::Claude, "stream-json", "limit-event") => {
                self.init();
                out(&json!({"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": reset, "rateLimitType": "five_hour",
                    "overageStatus": "rejected", "overageDisabledReason": "org_level_disabled", "isUsingOverage": false}, "session_id": self.session}).to_string());
                out(&json!({"type": "assistant", "message": {"id": "msg_limit", "model": "<synthetic>", "role": "assistant",
                    "content": [{"type": "text", "text": text}], "stop_reason": "stop_sequence", "usage": {"input_tokens": 0, "output_tokens": 0}},
                    "error": "rate_limit", "parent_tool_use_id": null, "session_id": self.session}).to_string());
                out(&self
                    .result_event(true, "success", Some(&text), None, Some(429), false)
                    .to_string());
            }
            (Flavor::Claude, "json" | "stream-json", _) => {
                if self.inv.format == "stream-json" {
                    self.init();
                }
                let status = (scenario == "limit-event").then_some(429);
                out(&self
                    .result_event(true, "success", Some(&text), None, status, false)
                    .to_string());
            }
            _ => out(&text),
        }
        1
    }
}
