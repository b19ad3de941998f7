//! The real gemini CLI (tests/real-cli/setup.sh) under a real conductor, against the local
//! mock API (issue 13): the tests every real CLI passes ([`real_cli_tests!`]) and what only
//! Gemini CLI does. Each test skips with a printed reason when the CLI is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mozart_tests::real_cli::{RealCliEnv, GEMINI};
use mozart_tests::real_cli_tests;

real_cli_tests!(GEMINI);

#[test]
fn a_failed_cli_names_its_cause() {
    let Some(rc) = RealCliEnv::start(&GEMINI) else {
        return;
    };
    // Gemini CLI prints its error document on stderr and exits 1.
    rc.check_failure_names_its_cause(&GEMINI, "is not found for API version");
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
