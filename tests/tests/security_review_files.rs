//! The reviewer loop's files (docs/mochi.md) in a workspace another local user can write, or
//! that the instrument changes (docs/security.md "Files"): a link planted where Mozart writes
//! a task's result or keeps its review records never has Mozart write or delete through it,
//! and a FIFO where a memory file is read never makes the job wait.

use crate::harness::*;

use mozart_tests::mochi::{Project, REVIEWER_PROMPT, TASKS};
use mozart_tests::TestEnv;
use serde_json::json;

/// A `.mozart-review` that is a link to a directory of the owner's holding a
/// `sheet-1.json`: a fresh run used to delete that file through the link (and keep its
/// review memory there). The run now refuses the link, naming it, and deletes nothing.
#[test]
fn a_review_records_directory_that_is_a_link_is_refused_and_nothing_is_deleted_through_it() {
    let env = TestEnv::new();
    let victim = env.work.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("sheet-1.json"), "{\"mine\": true}\n").unwrap();
    let ws = env.work.join("rv-ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::os::unix::fs::symlink(&victim, ws.join(".mozart-review")).unwrap();
    let score = env.write_score(
        "rv.yaml",
        "name: rv\nworkspace: ./rv-ws\ninstrument: claude_cli\nsheet: {size: 1, total_items: 1}\nreview: {max_iterations: 1}\nretry: {base_delay_seconds: 0.1, max_retries: 0}\nprompt: {template: \"Write it\"}\n",
    );
    let script = standin_script(
        &env,
        "rv",
        &json!({"routes": [
            {"contains": [REVIEWER_PROMPT], "steps": [{"result": "DONE"}]},
            {"contains": ["Write it"], "steps": [{"result": "written"}]}
        ]}),
    );
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "rv", 60.0);
    assert_eq!(
        std::fs::read_to_string(victim.join("sheet-1.json")).unwrap_or_default(),
        "{\"mine\": true}\n",
        "the owner's file was deleted through the link"
    );
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        1,
        "review memory was written through the link"
    );
    assert_eq!(doc["status"], "failed", "{doc:#}");
    let text = doc.to_string();
    assert!(
        text.contains(".mozart-review is a symbolic link"),
        "the error does not name the link: {doc:#}"
    );
}

/// The worker replaces AGENTS.md (a memory file the next iteration's prompt quotes) with a
/// FIFO: the second iteration used to wait for a writer for ever (the job stayed running).
/// Now the file is left out of the prompt and the loop goes on to its DONE.
#[test]
fn a_fifo_as_a_memory_file_does_not_hang_the_review_loop() {
    let env = TestEnv::new();
    let score = env.write_score(
        "mem.yaml",
        "name: mem\nworkspace: ./mem-ws\ninstrument: claude_cli\nsheet: {size: 1, total_items: 1}\nreview: {max_iterations: 2}\nretry: {base_delay_seconds: 0.1}\nprompt: {template: \"Write it\"}\n",
    );
    let agents = env.work.join("mem-ws/.mozart-review/sheet-1/AGENTS.md");
    let script = standin_script(
        &env,
        "mem",
        &json!({"routes": [
            {"contains": [REVIEWER_PROMPT], "steps": [{"result": "RETRY: again"}, {"result": "DONE"}]},
            {"contains": ["Write it"], "steps": [
                {"run": format!("rm -f {0} && mkfifo {0}", agents.display()), "result": "first"},
                {"result": "second"}
            ]}
        ]}),
    );
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &score, &[]);
    let doc = wait_terminal(&env, "mem", 60.0);
    assert_eq!(doc["status"], "completed", "{doc:#}\n{}", env.log());
    assert_eq!(sheet(&doc, 1)["review"]["iteration"], 2, "{doc:#}");
}

/// `dispatch: file` writes `output/<slug>.md`; a link planted there to a file of the owner's
/// used to get the task's result written into that file. The dispatch now fails, naming the
/// link, and the owner's file keeps its text.
#[test]
fn a_file_dispatch_is_not_written_through_a_link() {
    let env = TestEnv::new();
    let p: Project = mozart_tests::mochi::project(&env, |score| {
        score
            .replace("instrument: claude-code", "instrument: claude_cli")
            .replace("dispatch: pr ", "dispatch: file ")
    });
    let victim = env.work.join("victim.conf");
    std::fs::write(&victim, "precious = true\n").unwrap();
    let output = p.repo.join(".mochi-workspace/output");
    std::fs::create_dir_all(&output).unwrap();
    std::os::unix::fs::symlink(&victim, output.join(format!("{}.md", TASKS[0].1))).unwrap();
    let mut routes = Vec::new();
    for (task, _) in TASKS {
        routes.push(json!({"contains": [REVIEWER_PROMPT, task], "steps": [{"result": "DONE"}]}));
    }
    for (task, slug) in TASKS {
        routes.push(json!({"contains": [task], "steps": [{
            "run": format!("echo {slug} >> work.txt && git add work.txt && git -c user.name=w -c user.email=w@example.com commit -qm 'work on {slug}'"),
            "result": format!("RESULT OF {slug}"),
        }]}));
    }
    let script = standin_script(&env, "mochi", &json!({ "routes": routes }));
    start_with_env(&env, &[("MOZART_STANDIN_SCRIPT", &script)]);
    run(&env, &p.score, &[]);
    let doc = wait_terminal(&env, "mochi", 90.0);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious = true\n",
        "the result was written through the link"
    );
    let text = doc.to_string();
    assert!(
        text.contains(&format!("cannot write output/{}.md: ", TASKS[0].1))
            && text.contains("is a symbolic link: it is not written through"),
        "the failed dispatch does not name the link: {doc:#}"
    );
    let other = std::fs::read_to_string(output.join(format!("{}.md", TASKS[1].1))).unwrap();
    assert!(
        other.contains(&format!("RESULT OF {}", TASKS[1].1)),
        "{other}"
    );
}
