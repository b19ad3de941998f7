//! `mozart dashboard` over plain HTTP (no browser): bad input gets clear pages and status
//! codes, state-changing requests need the token and the same origin, the conductor being
//! down is a page that says so, and `dashboard:` in conductor.yaml serves it from the
//! conductor process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use mozart_tests::{sleepy_shell_score, TestEnv};

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `mozart dashboard --port 0` and return it with its `host:port`.
fn dashboard(env: &TestEnv, extra: &[&str]) -> (Reaped, String) {
    let mut args = vec!["dashboard", "--port", "0"];
    args.extend_from_slice(extra);
    let mut child = env
        .command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    // Keep its stdout open: the CLI dies of SIGPIPE when it prints into a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let addr = line
        .trim()
        .trim_start_matches("Mozart dashboard: http://")
        .trim_end_matches('/')
        .to_string();
    assert!(addr.starts_with("127.0.0.1:"), "printed: {line:?}");
    (Reaped(child), addr)
}

/// One HTTP/1.1 request; the status code and the body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}

fn csrf_token(page: &str) -> String {
    let at = page.find("name=\"token\" value=\"").expect("a form token") + 20;
    page[at..].split('"').next().unwrap().to_string()
}

#[test]
fn bad_input_is_a_clear_page_and_writes_need_the_token_and_same_origin() {
    let env = TestEnv::new();
    // No conductor yet: the page says so and what to do, with 503.
    let (_dash, addr) = dashboard(&env, &[]);
    let (code, body) = http(&addr, "GET", "/jobs/anything", &[], "");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("Mozart conductor is not running."), "{body}");
    assert!(body.contains("Start it with: mozart start"), "{body}");
    let (code, body) = http(&addr, "GET", "/", &[], "");
    assert_eq!(code, 200);
    assert!(body.contains("Mozart conductor is not running."), "{body}");

    env.start_conductor();
    let score = env.write_score("held", &sleepy_shell_score("held", 3, 3.0));
    assert!(env
        .mozart(&["run", &score.display().to_string()])
        .status
        .success());
    let (code, body) = http(&addr, "GET", "/jobs/no-such-job", &[], "");
    assert_eq!(code, 404);
    assert!(body.contains("Score not found: no-such-job"), "{body}");
    assert!(!body.to_lowercase().contains("panicked") && !body.contains("backtrace"));

    let (code, page) = http(&addr, "GET", "/jobs/held", &[], "");
    assert_eq!(code, 200, "{page}");
    let token = csrf_token(&page);
    let origin = format!("http://{addr}");

    // No token / wrong token / another site: refused, the job untouched.
    let (code, body) = http(
        &addr,
        "POST",
        "/jobs/held/cancel",
        &[("Origin", &origin)],
        "",
    );
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("carries no dashboard token"), "{body}");
    let (code, body) = http(
        &addr,
        "POST",
        "/jobs/held/cancel",
        &[("Origin", &origin)],
        "token=wrong",
    );
    assert_eq!(code, 403);
    assert!(body.contains("token is wrong"), "{body}");
    let evil = format!("token={token}");
    let (code, body) = http(
        &addr,
        "POST",
        "/jobs/held/cancel",
        &[("Origin", "http://evil.example")],
        &evil,
    );
    assert_eq!(code, 403);
    assert!(body.contains("came from another site"), "{body}");
    // DNS rebinding: a foreign Host name is refused outright.
    let (code, _) = http(&addr, "GET", "/", &[("Host", "evil.example")], "");
    assert_eq!(code, 421);
    let status = env.mozart(&["status", "held", "--json"]);
    assert!(String::from_utf8_lossy(&status.stdout).contains("\"running\""));

    // The real thing: same origin, right token.
    let (code, body) = http(
        &addr,
        "POST",
        "/jobs/held/cancel",
        &[("Origin", &origin)],
        &evil,
    );
    assert_eq!(code, 303, "{body}");
    let flash = body
        .lines()
        .find_map(|l| {
            l.strip_prefix("location: ")
                .or_else(|| l.strip_prefix("Location: "))
        })
        .unwrap()
        .trim()
        .to_string();
    let (_, page) = http(&addr, "GET", &flash, &[], "");
    assert!(page.contains("Score &#x27;held&#x27; cancelled."), "{page}");
    // Cancelling again is the CLI's error, shown in the page.
    let (_, body) = http(
        &addr,
        "POST",
        "/jobs/held/cancel",
        &[("Origin", &origin)],
        &evil,
    );
    let again = body
        .lines()
        .find_map(|l| {
            l.to_lowercase()
                .strip_prefix("location: ")
                .map(str::to_string)
        })
        .unwrap();
    let (_, page) = http(&addr, "GET", again.trim(), &[], "");
    assert!(page.contains("not found or already stopped"), "{page}");

    // The validator: broken YAML names the problem; a missing form is a 400, not a 500.
    let (code, body) = http(
        &addr,
        "POST",
        "/validate",
        &[("Origin", &origin)],
        &format!("token={token}&yaml=name%3A+%5Bbroken"),
    );
    assert_eq!(code, 200);
    assert!(body.contains("YAML syntax error"), "{body}");
    let (code, _) = http(&addr, "POST", "/validate", &[("Origin", &origin)], "");
    assert_eq!(code, 400);
}

#[test]
fn a_non_loopback_dashboard_needs_a_token_and_then_every_request_carries_it() {
    let env = TestEnv::new();
    let out = env.mozart(&["dashboard", "--host", "0.0.0.0", "--port", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pass --token"), "{text}");

    let token = "0123456789abcdef0123";
    let (_dash, addr) = dashboard(&env, &["--token", token]);
    let (code, _) = http(&addr, "GET", "/", &[], "");
    assert_eq!(code, 401);
    let (code, body) = http(&addr, "GET", &format!("/?token={token}"), &[], "");
    assert_eq!(code, 303, "{body}");
    assert!(body.contains(&format!("mozart_token={token}")), "{body}");
    let (code, _) = http(
        &addr,
        "GET",
        "/",
        &[("Cookie", &format!("mozart_token={token}"))],
        "",
    );
    assert_eq!(code, 200);
    let (code, _) = http(
        &addr,
        "GET",
        "/",
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    );
    assert_eq!(code, 200);
}

#[test]
fn conductor_yaml_can_serve_the_dashboard_from_the_conductor() {
    let env = TestEnv::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        env.home.join("conductor.yaml"),
        format!("dashboard:\n  enabled: true\n  port: {port}\n"),
    )
    .unwrap();
    env.start_conductor();
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "no dashboard on {addr}; log:\n{}",
            env.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, body) = http(&addr, "GET", "/", &[], "");
    assert_eq!(code, 200);
    assert!(
        body.contains("conductor connected") || body.contains("No jobs"),
        "{body}"
    );
    assert!(env.log().contains("dashboard.listening"), "{}", env.log());
}
