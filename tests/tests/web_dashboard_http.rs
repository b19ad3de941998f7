//! `mozart dashboard` over plain HTTP (no browser): bad input gets clear pages and status
//! codes, state-changing requests need the token and the same origin, the conductor being
//! down is a page that says so, and `dashboard:` in conductor.yaml serves it from the
//! conductor process.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use mozart_tests::web::{self, form_token, login, start_dashboard};
use mozart_tests::{sleepy_shell_score, TestEnv};

/// A dashboard started with its defaults, logged in with the address it printed: its
/// address and a request function carrying the session cookie.
fn dashboard(env: &TestEnv) -> (web::Dashboard, String) {
    let dash = start_dashboard(env, &[]);
    let cookie = login(&dash.addr, &dash.url);
    (dash, cookie)
}

/// A request with the session cookie: status and the whole answer.
fn http(
    addr: &str,
    cookie: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut all = vec![("Cookie", cookie)];
    all.extend_from_slice(headers);
    let r = web::http(addr, method, path, &all, body);
    (r.status, r.raw)
}

#[test]
fn bad_input_is_a_clear_page_and_writes_need_the_token_and_same_origin() {
    let env = TestEnv::new();
    // No conductor yet: the page says so and what to do, with 503.
    let (dash, cookie) = dashboard(&env);
    let addr = dash.addr.clone();
    let http = |method: &str, path: &str, headers: &[(&str, &str)], body: &str| {
        http(&addr, &cookie, method, path, headers, body)
    };
    let (code, body) = http("GET", "/jobs/anything", &[], "");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("Mozart conductor is not running."), "{body}");
    assert!(body.contains("Start it with: mozart start"), "{body}");
    let (code, body) = http("GET", "/", &[], "");
    assert_eq!(code, 200);
    assert!(body.contains("Mozart conductor is not running."), "{body}");

    env.start_conductor();
    let score = env.write_score("held", &sleepy_shell_score("held", 3, 3.0));
    assert!(env
        .mozart(&["run", &score.display().to_string()])
        .status
        .success());
    let (code, body) = http("GET", "/jobs/no-such-job", &[], "");
    assert_eq!(code, 404);
    assert!(body.contains("Score not found: no-such-job"), "{body}");
    assert!(!body.to_lowercase().contains("panicked") && !body.contains("backtrace"));

    let (code, page) = http("GET", "/jobs/held", &[], "");
    assert_eq!(code, 200, "{page}");
    let token = form_token(&page);
    let origin = format!("http://{addr}");

    // No token / wrong token / another site: refused, the job untouched.
    let (code, body) = http("POST", "/jobs/held/cancel", &[("Origin", &origin)], "");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("carries no dashboard token"), "{body}");
    let (code, body) = http(
        "POST",
        "/jobs/held/cancel",
        &[("Origin", &origin)],
        "token=wrong",
    );
    assert_eq!(code, 403);
    assert!(body.contains("token is wrong"), "{body}");
    let evil = format!("token={token}");
    let (code, body) = http(
        "POST",
        "/jobs/held/cancel",
        &[("Origin", "http://evil.example")],
        &evil,
    );
    assert_eq!(code, 403);
    assert!(body.contains("came from another site"), "{body}");
    // DNS rebinding: a foreign Host name is refused outright.
    let (code, _) = http("GET", "/", &[("Host", "evil.example")], "");
    assert_eq!(code, 421);
    let status = env.mozart(&["status", "held", "--json"]);
    assert!(String::from_utf8_lossy(&status.stdout).contains("\"running\""));

    // The real thing: same origin, right token.
    let (code, body) = http("POST", "/jobs/held/cancel", &[("Origin", &origin)], &evil);
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
    let (_, page) = http("GET", &flash, &[], "");
    assert!(page.contains("Score &#x27;held&#x27; cancelled."), "{page}");
    // Cancelling again is the CLI's error, shown in the page.
    let (_, body) = http("POST", "/jobs/held/cancel", &[("Origin", &origin)], &evil);
    let again = body
        .lines()
        .find_map(|l| {
            l.to_lowercase()
                .strip_prefix("location: ")
                .map(str::to_string)
        })
        .unwrap();
    let (_, page) = http("GET", again.trim(), &[], "");
    assert!(page.contains("not found or already stopped"), "{page}");

    // The validator: broken YAML names the problem; a missing form is a 400, not a 500.
    let (code, body) = http(
        "POST",
        "/validate",
        &[("Origin", &origin)],
        &format!("token={token}&yaml=name%3A+%5Bbroken"),
    );
    assert_eq!(code, 200);
    assert!(body.contains("YAML syntax error"), "{body}");
    let (code, _) = http("POST", "/validate", &[("Origin", &origin)], "");
    assert_eq!(code, 400);
}

#[test]
fn a_non_loopback_dashboard_needs_a_token_and_then_every_request_carries_it() {
    let env = TestEnv::new();
    let out = env.mozart(&["dashboard", "--host", "0.0.0.0", "--port", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pass --token"), "{text}");

    // A token on the command line is every local user's to read (ps): said.
    let out = env.mozart(&["dashboard", "--port", "0", "--token", "short"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("visible to every user of this machine")
            && err.contains("MOZART_DASHBOARD_TOKEN"),
        "{err}"
    );
    let token = "0123456789abcdef0123";
    let dash = start_dashboard(&env, &["--token", token]);
    // A token the user gave is not printed back.
    assert!(!dash.printed.contains(token), "{}", dash.printed);
    let addr = dash.addr.clone();
    let get = |headers: &[(&str, &str)], path: &str| web::http(&addr, "GET", path, headers, "");
    assert_eq!(get(&[], "/").status, 401);
    let resp = get(&[], &format!("/?token={token}"));
    assert_eq!(resp.status, 303, "{}", resp.raw);
    let set = resp.header("set-cookie").unwrap_or_default().to_string();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    // The session cookie is not the token.
    assert!(!set.contains(token), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    assert_eq!(get(&[("Cookie", &cookie)], "/").status, 200);
    let bearer = format!("Bearer {token}");
    assert_eq!(get(&[("Authorization", &bearer)], "/").status, 200);
    // The token itself is no cookie.
    let as_cookie = format!("{}={token}", cookie.split('=').next().unwrap());
    assert_eq!(get(&[("Cookie", &as_cookie)], "/").status, 401);
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
    // The conductor's dashboard is its owner's too: the token file in the Mozart home.
    assert_eq!(web::http(&addr, "GET", "/", &[], "").status, 401);
    let token = std::fs::read_to_string(env.home.join("dashboard.token")).unwrap();
    let cookie = login(&addr, &format!("http://{addr}/?token={}", token.trim()));
    let (code, body) = http(&addr, &cookie, "GET", "/", &[], "");
    assert_eq!(code, 200);
    assert!(
        body.contains("conductor connected") || body.contains("No jobs"),
        "{body}"
    );
    assert!(!env.log().contains(token.trim()), "the token is not logged");
    assert!(env.log().contains("dashboard.listening"), "{}", env.log());
}
