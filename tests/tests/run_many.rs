//! `mozart run` of several scores in one command (issue 24: submitting 1,000 scores): each is
//! handled as `mozart run FILE` handles it, and one that is refused stops none of the others.

use mozart_tests::{sleepy_shell_score, stdout, TestEnv};
use serde_json::Value;

#[test]
fn mozart_run_of_several_scores_submits_and_reports_each() {
    let env = TestEnv::new();
    env.start_conductor();
    let first = env.write_score("first.yaml", &sleepy_shell_score("first", 1, 0.0));
    let broken = env.write_score("broken.yaml", "name: broken\nsheet: [not, a, mapping\n");
    let doomed = sleepy_shell_score("doomed", 1, 0.0)
        .replace("RUN: sleep 0", "RUN: echo 'cannot work here' >&2; exit 3");
    let doomed = env.write_score(
        "doomed.yaml",
        &format!("{doomed}retry:\n  max_retries: 0\n"),
    );
    let last = env.write_score("last.yaml", &sleepy_shell_score("last", 2, 0.0));
    let files = [&first, &broken, &doomed, &last].map(|p| p.to_str().unwrap().to_string());

    let mut args = vec!["run"];
    args.extend(files.iter().map(String::as_str));
    let out = env.mozart(&args);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    // The broken score is refused (exit 1 as for it alone); the others go on regardless.
    assert_eq!(out.status.code(), Some(1), "{text}");
    for id in ["first", "doomed", "last"] {
        assert!(
            text.contains(&format!("Score submitted to conductor: {id}\n")),
            "{id} is submitted:\n{text}"
        );
    }
    assert!(
        text.contains("YAML syntax error"),
        "why broken.yaml was refused:\n{text}"
    );
    // The early-failure watch still reports a first sheet that fails at once.
    assert!(
        text.contains("The score has already failed: doomed"),
        "{text}"
    );
    assert!(text.contains("cannot work here"), "{text}");
    assert!(
        text.contains(&format!(
            "3 of 4 scores submitted; not submitted: {}\n",
            files[1]
        )),
        "{text}"
    );
    for id in ["first", "last"] {
        env.wait_completed(id);
    }
    let out = env.mozart(&["list", "--all", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = listed["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["job_id"].as_str())
        .collect();
    for id in ["first", "doomed", "last"] {
        assert!(ids.contains(&id), "{id} is a job: {ids:?}");
    }
    assert!(!ids.contains(&"broken"), "{ids:?}");

    // A flag that names one score's workspace is refused with several scores, before any
    // is sent.
    let out = env.mozart(&["run", &files[0], &files[3], "--workspace", "/tmp/one-ws"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--workspace applies to one score; give one CONFIG_FILE with it"),
        "{err}"
    );
}
