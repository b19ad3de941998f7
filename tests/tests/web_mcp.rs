//! `mozart mcp` driven by a client nobody here wrote: the official Python `mcp` package
//! (tests/web/mcp_client.py, from the venv tests/web/setup.sh makes) lists the tools,
//! validates, submits an inline score and polls it to completion, reads its logs and its
//! resource, and cancels a second, running job. Skips when the venv is absent.

use std::path::PathBuf;

use mozart_tests::{mozart_bin, TestEnv};

#[test]
fn the_official_python_mcp_client_drives_jobs_through_mozart_mcp() {
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web");
    let python = web.join(".venv/bin/python");
    if !python.exists() {
        mozart_tests::users::missing(
            &format!("the MCP venv at {}", python.display()),
            "run tests/web/setup.sh",
        );
        return;
    }
    let env = TestEnv::new();
    env.start_conductor();
    // The client starts `mozart mcp` itself, with this environment.
    let probe = env.command(&["--version"]);
    let mut client = std::process::Command::new(&python);
    client
        .arg(web.join("mcp_client.py"))
        .arg(mozart_bin())
        .arg(&env.work);
    for (k, v) in probe.get_envs() {
        match v {
            Some(v) => client.env(k, v),
            None => client.env_remove(k),
        };
    }
    let out = client.output().expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "MCP client failed:\n{stdout}\n{}\nconductor log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        env.log()
    );
}
