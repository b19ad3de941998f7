//! The hint after an authentication failure names the key variables of the instrument that
//! are set in the conductor's environment. Its own test binary with a single test: it changes
//! the process environment, which is safe only before any other thread reads it (a unit test
//! beside others that spawn processes could race them).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use mozart_backends::{Backend, ExecutionRequest, InstrumentProfile, ProfileBackend};

#[tokio::test]
async fn the_key_hint_names_the_keys_that_are_set() {
    std::env::set_var("MOZART_HINT_TEST_A_API_KEY", "sk-hint-test-value");
    std::env::remove_var("MOZART_HINT_TEST_B_TOKEN");
    std::env::remove_var("MOZART_HINT_TEST_C_API_KEY");
    std::env::remove_var("MOZART_HINT_TEST_D_TOKEN");
    let run = |keys: &str| {
        let yaml = format!("name: k\ndisplay_name: K\nkind: cli\ncli:\n  command:\n    executable: sh\n    prompt_flag: '-c'\n    required_env: [{keys}, PATH]\n  output:\n    format: text\n  errors:\n    auth_error_patterns: [\"invalid api key\"]\n");
        let backend = ProfileBackend::new(Arc::new(
            InstrumentProfile::from_yaml(&yaml, "test").unwrap(),
        ))
        .unwrap();
        async move {
            let dir = tempfile::tempdir().unwrap();
            let r = backend
                .execute(ExecutionRequest::new(
                    "echo 'invalid api key' >&2; exit 1".to_string(),
                    dir.path(),
                    Duration::from_secs(30),
                ))
                .await;
            r.error_message.unwrap_or_default()
        }
    };
    let m = run("MOZART_HINT_TEST_A_API_KEY, MOZART_HINT_TEST_B_TOKEN").await;
    assert!(
        m.ends_with("Authentication failed: check MOZART_HINT_TEST_A_API_KEY in the conductor's environment, or log the CLI in"),
        "{m}"
    );
    let m = run("MOZART_HINT_TEST_C_API_KEY, MOZART_HINT_TEST_D_TOKEN").await;
    assert!(
        m.ends_with("Authentication failed: none of MOZART_HINT_TEST_C_API_KEY / MOZART_HINT_TEST_D_TOKEN is set in the conductor's environment: set one, or log the CLI in"),
        "{m}"
    );
}
