//! The real gemini CLI (tests/real-cli/setup.sh) under a real conductor, against the local
//! mock API (issue 13): the tests every real CLI passes ([`real_cli_tests!`]) and what only
//! Gemini CLI does. Each test skips with a printed reason when the CLI is not installed.

use std::time::{Duration, Instant};

use mozart_tests::real_cli::{write_file_score, RealCliEnv, GEMINI};
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

#[test]
fn a_rate_limit_wait_survives_a_kill_9_of_the_conductor_and_ends_on_time() {
    let Some(rc) = RealCliEnv::start(&GEMINI) else {
        return;
    };
    // The API refuses for 20 s and says "retry in 20s"; the conductor is killed (-9) while
    // the sheet waits and started again.
    let scenario = "ratelimit mock-ms:20000 mock-retry:20";
    let none = "retry: {max_retries: 0}\n";
    let score = write_file_score("rc-restart", &GEMINI.instrument(90), 1, scenario, none);
    rc.run_score("rc-restart", &score);
    let before = rc.wait_for("rc-restart", 30, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    let until = before["sheets"]["1"]["rate_limit"]["until"]
        .as_f64()
        .unwrap();
    let pid = rc.env.conductor_pid().expect("conductor pid");
    mozart_tests::signal(pid, "KILL");
    let deadline = Instant::now() + Duration::from_secs(10);
    while mozart_tests::alive(pid) {
        assert!(
            Instant::now() < deadline,
            "conductor {pid} survived SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    rc.start_conductor();

    // After the restart the sheet still shows the wait, in the API's words, with the time
    // left to the same deadline (issue 22: the restored wait was invisible).
    let doc = rc.wait_for("rc-restart", 15, |d| {
        d["sheets"]["1"]["rate_limit"].is_object()
    });
    let wait = &doc["sheets"]["1"]["rate_limit"];
    assert_eq!(wait["instrument"], "gemini-cli", "{doc:#}");
    let reason = wait["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("429") && reason.contains("20s"),
        "the API's own words survive the restart: {doc:#}"
    );
    let left = wait["seconds_left"].as_f64().unwrap();
    assert!(left > 0.0 && left <= 20.0, "{doc:#}");
    assert!(
        (wait["until"].as_f64().unwrap() - until).abs() < 1.0,
        "the same deadline: {doc:#}"
    );
    let text = mozart_tests::stdout(&rc.mozart(&["status", "rc-restart"]));
    assert!(text.contains("Rate Limit — Sheet 1"), "{text}");
    assert!(text.contains("Runs again in"), "{text}");

    // It ends on time: not before the deadline, and soon after it, by itself.
    let doc = rc.wait_done("rc-restart", 60);
    rc.assert_completed("rc-restart", &doc);
    let now = mozart_state::epoch_now();
    assert!(now >= until - 1.0, "not before the deadline");
    // The re-run itself (a Node CLI's start, its request, the check) is all that may come
    // after the deadline: seconds on a quiet machine, up to ~20 s on a CI machine running four
    // such tests and builds at once. A wait not restored would end at once (caught above) or
    // after the default wait (past `wait_done`'s minute).
    assert!(
        now < until + 30.0,
        "soon after the deadline: {}s late",
        now - until
    );
    assert_eq!(doc["execution"]["total_retry_count"], 0, "{doc:#}");
}
