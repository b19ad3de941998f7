//! Error classification (execution.md §7.5) of arbitrary instrument results, and the
//! rate-limit reset-time parser it leans on (claude-code-output.md §6.4).
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use mozart_backends::classify::parse_reset_time;
use mozart_backends::{classify, ExecutionResult};

#[derive(Debug, Arbitrary)]
struct Input {
    success: bool,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    stdout: String,
    stderr: String,
    result_text: Option<String>,
    error_message: Option<String>,
    error_type: Option<String>,
    rate_limited: bool,
    api_error_status: Option<u16>,
    timed_out: bool,
}

fuzz_target!(|input: Input| {
    let result = ExecutionResult {
        success: input.success,
        exit_code: input.exit_code,
        exit_signal: input.exit_signal,
        stdout: input.stdout,
        stderr: input.stderr,
        result_text: input.result_text,
        error_message: input.error_message,
        error_type: input.error_type,
        rate_limited: input.rate_limited,
        api_error_status: input.api_error_status,
        timed_out: input.timed_out,
        ..Default::default()
    };
    let classification = classify(&result);
    let _ = classification.should_retry();
    let _ = parse_reset_time(&result.stdout);
});
