//! The real gemini CLI (tests/real-cli/setup.sh) under a real conductor, against the local
//! mock API (issue 13): the tests every real CLI passes ([`real_cli_tests!`]) and what only
//! Gemini CLI does. Each test skips with a printed reason when the CLI is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mozart_tests::real_cli::{RealCliEnv, GEMINI};
use mozart_tests::real_cli_tests;

real_cli_tests!(GEMINI);

#[test]
fn a_429_is_a_rate_limit_waited_out_without_spending_a_retry() {
    let Some(rc) = RealCliEnv::start(&GEMINI) else {
        return;
    };
    rc.check_rate_limit_waited_out(&GEMINI, 7500);
}

#[test]
fn an_overloaded_api_is_retried() {
    let Some(rc) = RealCliEnv::start(&GEMINI) else {
        return;
    };
    // Retried — by the CLI's own retry or by the conductor's — until the API answered.
    rc.run_overloaded(&GEMINI, "rc-overload", 1);
    rc.check_overload_retried("rc-overload");
}
