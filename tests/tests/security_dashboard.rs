//! Issue 21, the dashboard and job IDs, against the real binary and a real second account:
//! a dashboard started with its defaults serves its owner only (another local user gets 401
//! on every page, stream, action and the validator), its token file is private, a posted
//! score shows nothing of the files it names, every answer carries a strict page policy,
//! and a job ID that could carry script is refused by `mozart run`, by `job.submit` and by
//! the MCP `run` tool.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::Duration;

use mozart_tests::users::{self, LocalUser};
use mozart_tests::web::{
    self, form_encode, form_token, login, mcp_calls, start_dashboard, HttpResponse,
};
use mozart_tests::{sleepy_shell_score, stdout, TestEnv};
use serde_json::json;

/// `curl` as `user` against the dashboard: the whole answer (status, headers, body).
fn curl_as(user: &LocalUser, args: &[&str], url: &str) -> HttpResponse {
    let out = user
        .command("curl")
        .args(["-s", "-i", "--max-time", "5"])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("run curl as the other user");
    web::parse(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn have_curl() -> bool {
    if Command::new("curl").arg("--version").output().is_ok() {
        return true;
    }
    users::missing("curl", "apt-get install curl");
    false
}

/// A page's text with the HTML escapes minijinja writes undone (for assertions on paths).
fn unescape(html: &str) -> String {
    html.replace("&#x2f;", "/")
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// A started conductor running `held` (slow enough to act on) and a dashboard with its
/// defaults (no flag at all).
fn running_dashboard(env: &TestEnv) -> web::Dashboard {
    env.start_conductor();
    let score = env.write_score("held", &sleepy_shell_score("held", 3, 4.0));
    let out = env.mozart(&["run", &score.display().to_string()]);
    assert!(out.status.success(), "{out:?}");
    start_dashboard(env, &[])
}

fn job_status(env: &TestEnv, id: &str) -> String {
    let resp = env.raw_call("job.status", json!({ "job_id": id }));
    resp["result"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn another_local_user_gets_401_everywhere_and_the_owner_gets_in_with_the_printed_address() {
    let Some(intruder) = users::intruder() else {
        return;
    };
    if !have_curl() {
        return;
    }
    let env = TestEnv::new();
    let dash = running_dashboard(&env);
    let base = format!("http://{}", dash.addr);
    let origin = format!("Origin: {base}");

    // The intruder knows the port (anyone can list listening sockets) but not the token.
    let tries: [(&str, Vec<&str>); 8] = [
        ("/", vec![]),
        ("/jobs/held", vec![]),
        ("/jobs/held/sheets/1/prompt", vec![]),
        ("/events/jobs", vec![]),
        ("/learning", vec![]),
        ("/static/app.js", vec![]),
        (
            "/jobs/held/cancel",
            vec!["-X", "POST", "-H", &origin, "-d", "token=x"],
        ),
        (
            "/validate",
            vec!["-X", "POST", "-H", &origin, "-d", "yaml=name%3A+x"],
        ),
    ];
    for (path, args) in &tries {
        let r = curl_as(&intruder, args, &format!("{base}{path}"));
        assert_eq!(r.status, 401, "{path} answered the other user: {}", r.raw);
        assert!(
            !r.body.contains("held"),
            "{path} leaked the job: {}",
            r.body
        );
    }
    // A guessed token and a forged session cookie fare no better.
    let r = curl_as(
        &intruder,
        &[],
        &format!("{base}/?token=0123456789abcdef0123"),
    );
    assert_eq!(r.status, 401, "{}", r.raw);
    let forged = format!(
        "Cookie: mozart_session_{}=00.00",
        dash.addr.split(':').nth(1).unwrap()
    );
    let r = curl_as(&intruder, &["-H", &forged], &format!("{base}/"));
    assert_eq!(r.status, 401, "{}", r.raw);
    assert_eq!(job_status(&env, "held"), "running", "the job was touched");

    // The owner: the printed address logs in, and the token leaves the address bar.
    assert!(dash.url.contains("/?token="), "printed: {}", dash.printed);
    let login_resp = web::http(
        &dash.addr,
        "GET",
        dash.url.trim_start_matches(&base),
        &[],
        "",
    );
    assert_eq!(login_resp.status, 303, "{}", login_resp.raw);
    assert_eq!(login_resp.header("location"), Some("/"));
    let set = login_resp.header("set-cookie").unwrap_or_default();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let token = dash.url.split("token=").nth(1).unwrap().to_string();
    assert!(!set.contains(&token), "the cookie is not the token: {set}");
    let cookie = set.split(';').next().unwrap().to_string();
    let page = web::http(&dash.addr, "GET", "/jobs/held", &[("Cookie", &cookie)], "");
    assert_eq!(page.status, 200, "{}", page.raw);
    assert!(!page.body.contains(&token), "a page shows the access token");
    let csrf = form_token(&page.body);

    // Form tokens belong to their session: another session's is refused.
    let other = login(&dash.addr, &dash.url);
    let other_page = web::http(&dash.addr, "GET", "/jobs/held", &[("Cookie", &other)], "");
    assert_ne!(form_token(&other_page.body), csrf);
    let r = web::http(
        &dash.addr,
        "POST",
        "/jobs/held/cancel",
        &[("Cookie", &other), ("Origin", &base)],
        &format!("token={csrf}"),
    );
    assert_eq!(r.status, 403, "{}", r.raw);
    assert!(r.body.contains("token is wrong"), "{}", r.body);
    assert_eq!(job_status(&env, "held"), "running");

    let r = web::http(
        &dash.addr,
        "POST",
        "/jobs/held/cancel",
        &[("Cookie", &cookie), ("Origin", &base)],
        &format!("token={csrf}"),
    );
    assert_eq!(r.status, 303, "{}", r.raw);
    assert_eq!(job_status(&env, "held"), "cancelled");
}

#[test]
fn the_token_file_is_private_and_a_file_others_could_know_is_refused() {
    let env = TestEnv::new();
    let file = env.home.join("dashboard.token");
    {
        let dash = start_dashboard(&env, &[]);
        let meta = std::fs::symlink_metadata(&file).expect("the dashboard made its token file");
        assert!(meta.is_file());
        assert_eq!(meta.mode() & 0o777, 0o600, "token file mode");
        assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
        let token = std::fs::read_to_string(&file).unwrap();
        assert!(token.trim().len() >= 32, "{token:?}");
        assert!(
            dash.url.ends_with(&format!("/?token={}", token.trim())),
            "printed: {}",
            dash.printed
        );
        assert!(dash
            .printed
            .starts_with("Mozart dashboard: http://127.0.0.1:"));
    }
    // Started again: the same token.
    let again = start_dashboard(&env, &[]);
    let token = std::fs::read_to_string(&file).unwrap();
    assert!(again.url.ends_with(token.trim()));
    drop(again);

    let refused = |want: &str| {
        let out = env.mozart(&["dashboard", "--port", "0"]);
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.contains(want), "{text}");
        assert!(text.contains(&file.display().to_string()), "{text}");
        assert!(
            !text.contains(token.trim()),
            "the refusal shows the token: {text}"
        );
    };
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    refused("other users can read or change it");
    assert_eq!(
        std::fs::metadata(&file).unwrap().mode() & 0o777,
        0o644,
        "refused, not silently changed"
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
    refused("belongs to uid 65534");
    std::fs::remove_file(&file).unwrap();
    let elsewhere = env.root().join("elsewhere");
    std::fs::write(&elsewhere, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    refused("not a regular file");
}

#[test]
fn a_posted_score_shows_nothing_of_the_files_it_names() {
    let env = TestEnv::new();
    // A file only root can read, like the dashboard's (root) process.
    let secret_dir = env.root().join("private");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::set_permissions(&secret_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let secret = secret_dir.join("secret.txt");
    std::fs::write(
        &secret,
        "TOP-SECRET-5f2c first line\nTOP-SECRET-5f2c second\n",
    )
    .unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let shadow: Vec<String> = std::fs::read_to_string("/etc/shadow")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.len() > 8)
        .map(str::to_string)
        .collect();

    let dash = start_dashboard(&env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    let base = format!("http://{}", dash.addr);
    let page = web::http(&dash.addr, "GET", "/validate", &[("Cookie", &cookie)], "");
    let csrf = form_token(&page.body);
    let post = |yaml: &str| {
        let r = web::http(
            &dash.addr,
            "POST",
            "/validate",
            &[("Cookie", &cookie), ("Origin", &base)],
            &format!("token={csrf}&yaml={}", form_encode(yaml)),
        );
        assert_eq!(r.status, 200, "{}", r.raw);
        unescape(&r.body)
    };
    let s = secret.display();
    for (what, yaml) in [
        (
            "/etc/shadow as the template",
            "name: peek\nsheet: {size: 1, total_items: 2}\nprompt: {template_file: /etc/shadow}\n"
                .to_string(),
        ),
        (
            "a root-only file as the template",
            format!("name: peek\nsheet: {{size: 1, total_items: 2}}\nprompt: {{template_file: {s}}}\n"),
        ),
        (
            "a root-only file as a prelude",
            format!("name: peek\nsheet:\n  size: 1\n  total_items: 2\n  prelude:\n    - {{file: {s}, as: context}}\nprompt: {{template: \"hello {{{{ sheet_num }}}}\"}}\n"),
        ),
    ] {
        let body = post(&yaml);
        assert!(!body.contains("TOP-SECRET-5f2c"), "{what}: the file's content is shown:\n{body}");
        for line in &shadow {
            assert!(!body.contains(line.as_str()), "{what}: /etc/shadow is shown");
        }
        assert!(
            body.contains("Not read: the dashboard previews only the posted text"),
            "{what}: {body}"
        );
        assert!(body.contains("Sheet plan"), "{what}: still a preview: {body}");
    }
    let body = post(&format!(
        "name: peek\nsheet: {{size: 1, total_items: 2}}\nprompt: {{template_file: {s}}}\n"
    ));
    assert!(
        body.contains(&format!("prompt.template_file ({s})")),
        "{body}"
    );
    assert!(body.contains("prompt.template_file not read"), "{body}");
}

#[test]
fn every_answer_carries_a_strict_page_policy_and_pages_hold_no_inline_script() {
    let env = TestEnv::new();
    let dash = running_dashboard(&env);
    let cookie = login(&dash.addr, &dash.url);
    let check = |what: &str, r: &HttpResponse| {
        let csp = r.header("content-security-policy").unwrap_or_else(|| {
            panic!("{what}: no Content-Security-Policy: {}", r.raw);
        });
        for part in [
            "default-src 'self'",
            "script-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(part), "{what}: {csp}");
        }
        assert!(!csp.contains("unsafe"), "{what}: {csp}");
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{what}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{what}"
        );
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{what}");
    };
    check("a refusal", &web::http(&dash.addr, "GET", "/", &[], ""));
    let path = dash
        .url
        .trim_start_matches(&format!("http://{}", dash.addr));
    check("the login", &web::http(&dash.addr, "GET", path, &[], ""));
    let inline_script = regex::Regex::new(r"(?i)<script(\s[^>]*)?>\s*[^<\s]").unwrap();
    let handler = regex::Regex::new(r#"(?i)\son[a-z]+\s*="#).unwrap();
    let style_attr = regex::Regex::new(r#"(?i)(\sstyle\s*=|<style)"#).unwrap();
    for page in [
        "/",
        "/jobs/held",
        "/validate",
        "/learning",
        "/jobs/nope",
        "/nowhere",
    ] {
        let r = web::http(&dash.addr, "GET", page, &[("Cookie", &cookie)], "");
        check(page, &r);
        assert!(!inline_script.is_match(&r.body), "{page}: inline script");
        assert!(!handler.is_match(&r.body), "{page}: inline event handler");
        assert!(!style_attr.is_match(&r.body), "{page}: inline style");
    }
    let job = web::http(&dash.addr, "GET", "/jobs/held", &[("Cookie", &cookie)], "");
    assert!(
        job.body.contains("data-confirm=\"Cancel held?\""),
        "{}",
        job.body
    );
    let js = web::http(
        &dash.addr,
        "GET",
        "/static/app.js",
        &[("Cookie", &cookie)],
        "",
    );
    check("app.js", &js);
    assert!(
        js.body.contains("data-confirm"),
        "app.js asks before a cancel"
    );
    let sse = web::http_with(
        &dash.addr,
        "GET",
        "/events/jobs",
        &[("Cookie", &cookie)],
        "",
        Some(Duration::from_secs(2)),
    );
    assert_eq!(sse.status, 200, "{}", sse.raw);
    check("the live stream", &sse);
}

/// A score file whose name (so its job ID) carries quotes and angle brackets.
const HOSTILE: &str = "q'<>\"";

#[test]
fn a_job_id_that_could_carry_script_is_refused_by_run_by_job_submit_and_by_mcp() {
    let env = TestEnv::new();
    env.start_conductor();
    let file = env.write_score(HOSTILE, &sleepy_shell_score("hostile", 1, 0.1));
    let path = file.display().to_string();
    let rule = "must start with a letter or digit and contain only letters, digits";

    // `mozart run`: refused before anything is sent, with the rule and the fix.
    let out = env.mozart(&["run", &path]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(rule), "{text}");
    assert!(
        text.contains("Rename the score file (for example to q.yaml)"),
        "{text}"
    );
    // A dry run submits nothing: it still works, as upstream's.
    assert_eq!(
        env.mozart(&["run", &path, "--dry-run"]).status.code(),
        Some(0)
    );

    // The raw protocol, as any client could send it.
    let resp = env.raw_call("job.submit", json!({"config_path": path, "fresh": false}));
    let result = &resp["result"];
    assert_eq!(result["status"], "rejected", "{resp}");
    let message = result["message"].as_str().unwrap_or_default();
    assert!(message.contains(rule), "{message}");
    assert_eq!(result["job_id"], "", "{resp}");

    // The MCP `run` tool, inline and by path.
    let mcp = mcp_calls(
        &env,
        &[
            json!({"name": "run", "arguments": {"yaml": sleepy_shell_score("x", 1, 0.1), "name": HOSTILE}}),
            json!({"name": "run", "arguments": {"path": path}}),
        ],
    );
    for reply in &mcp {
        let result = &reply["result"];
        assert_eq!(result["isError"], true, "{reply}");
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains(rule), "{text}");
    }
    assert!(
        !env.home
            .join("mcp-scores")
            .join(format!("{HOSTILE}.yaml"))
            .exists(),
        "the refused inline score was written"
    );

    let list = env.raw_call("job.list", json!({}));
    assert!(!list.to_string().contains("q'"), "a job was made: {list}");
}

/// The other user cannot read the token file (its directory and the file are private).
#[test]
fn the_other_user_cannot_read_the_token_file() {
    let Some(intruder) = users::intruder() else {
        return;
    };
    let env = TestEnv::new();
    // Make the path reachable on purpose: only the file's own mode stands in the way.
    for dir in [env.root(), env.home.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let dash = start_dashboard(&env, &[]);
    let file = env.home.join("dashboard.token");
    let out = intruder.command("cat").arg(&file).output().unwrap();
    assert!(!out.status.success(), "the other user read the token file");
    let token = dash
        .url
        .split("token=")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    assert!(!token.is_empty());
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&token));
}
