//! MCP `run` with an inline score (issue 23): the score file `<dir>/<name>.yaml` is replaced
//! only when the run is accepted; a refused run leaves what was there.

use mozart_tests::web::mcp_calls;
use mozart_tests::{sleepy_shell_score, TestEnv};
use serde_json::json;

#[test]
fn a_refused_inline_run_does_not_overwrite_the_saved_score() {
    let env = TestEnv::new();
    let dir = env.work.join("inline");
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("keep.yaml");
    let original = sleepy_shell_score("keep", 1, 0.1);
    std::fs::write(&saved, &original).unwrap();
    let broken = "name: keep\nworkspace: ./ws\ninstrument: shell\nsheet:\n  size: 1\n  total_items: 1\nprompt:\n  template: \"RUN: echo {{ nope }}\"\n";
    let valid = sleepy_shell_score("keep", 2, 0.1);
    let dir_arg = dir.to_str().unwrap();

    // No conductor: the run is refused, and the file is what it was.
    let replies = mcp_calls(
        &env,
        &[
            json!({"name": "run", "arguments": {"yaml": broken, "directory": dir_arg}}),
            json!({"name": "run", "arguments": {"yaml": valid, "directory": dir_arg}}),
        ],
    );
    for reply in &replies {
        assert_eq!(reply["result"]["isError"], true, "{reply}");
    }
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), original);
    let fresh = dir.join("fresh.yaml");
    let replies = mcp_calls(
        &env,
        &[
            json!({"name": "run", "arguments": {"yaml": sleepy_shell_score("fresh", 1, 0.1), "directory": dir_arg}}),
        ],
    );
    assert_eq!(replies[0]["result"]["isError"], true, "{}", replies[0]);
    assert!(
        !fresh.exists(),
        "a refused new inline score stays unwritten"
    );

    // Accepted: the file is the new score.
    env.start_conductor();
    let replies = mcp_calls(
        &env,
        &[json!({"name": "run", "arguments": {"yaml": valid, "directory": dir_arg}})],
    );
    assert_ne!(replies[0]["result"]["isError"], true, "{}", replies[0]);
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), valid);
    env.wait_completed("keep");
}
