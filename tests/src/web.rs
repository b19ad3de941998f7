//! Plain-HTTP helpers for the dashboard tests: start `mozart dashboard`, log in with the
//! address it printed, send raw HTTP/1.1 requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::TestEnv;

/// A child killed (and reaped) when the test ends, however it ends.
#[derive(Debug)]
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `mozart dashboard`.
#[derive(Debug)]
pub struct Dashboard {
    /// The process.
    pub child: Reaped,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The first line it printed, whole.
    pub printed: String,
    /// The URL it printed (`http://127.0.0.1:PORT/?token=…` without `--token`).
    pub url: String,
}

/// Start `mozart dashboard --port 0 <extra>` and wait for the URL it prints.
///
/// # Panics
/// If it does not start or prints no URL.
#[allow(clippy::expect_used)]
pub fn start_dashboard(env: &TestEnv, extra: &[&str]) -> Dashboard {
    let mut args = vec!["dashboard", "--port", "0"];
    args.extend_from_slice(extra);
    let mut child = env
        .command(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mozart dashboard");
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    out.read_line(&mut line)
        .expect("read the dashboard's first line");
    // Keep its stdout open: the CLI dies of SIGPIPE when it prints into a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let url = line
        .trim()
        .trim_start_matches("Mozart dashboard: ")
        .to_string();
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or("")
        .to_string();
    assert!(addr.starts_with("127.0.0.1:"), "printed: {line:?}");
    Dashboard {
        child: Reaped(child),
        addr,
        printed: line,
        url,
    }
}

/// One HTTP/1.1 response: status, headers (names lower-cased) and body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code (0 when the answer was not HTTP).
    pub status: u16,
    /// Header lines, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body (chunked encoding left as it came).
    pub body: String,
    /// Everything received.
    pub raw: String,
}

impl HttpResponse {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Send one HTTP/1.1 request and read the whole answer (`Connection: close`). `body`, when
/// not empty, is sent as a form. Streams (SSE) are read for at most `read_for` when given.
///
/// # Panics
/// If the dashboard cannot be reached.
#[allow(clippy::expect_used)]
pub fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    read_for: Option<Duration>,
) -> HttpResponse {
    let mut s = TcpStream::connect(addr).expect("connect to the dashboard");
    s.set_read_timeout(Some(read_for.unwrap_or(Duration::from_secs(30))))
        .expect("set read timeout");
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
    s.write_all(req.as_bytes()).expect("send the request");
    let mut bytes = Vec::new();
    // A stream ends by the read timeout: keep what came.
    let _ = s.read_to_end(&mut bytes);
    parse(String::from_utf8_lossy(&bytes).into_owned())
}

/// [`http_with`] for a request that ends by itself.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpResponse {
    http_with(addr, method, path, headers, body, None)
}

/// Split a raw answer into status, headers and body.
pub fn parse(raw: String) -> HttpResponse {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    HttpResponse {
        status,
        headers,
        body: body.to_string(),
        raw: raw.clone(),
    }
}

/// Open the printed login URL and return the session cookie (`name=value`) it sets.
///
/// # Panics
/// If the login is not a redirect with a cookie.
pub fn login(addr: &str, url: &str) -> String {
    let path = url
        .trim_start_matches("http://")
        .split_once('/')
        .map(|(_, p)| format!("/{p}"))
        .unwrap_or_else(|| "/".into());
    let resp = http(addr, "GET", &path, &[], "");
    assert_eq!(resp.status, 303, "login: {}", resp.raw);
    let cookie = resp
        .header("set-cookie")
        .unwrap_or_else(|| panic!("login set no cookie: {}", resp.raw));
    cookie.split(';').next().unwrap_or("").trim().to_string()
}

/// The form (CSRF) token in a page.
///
/// # Panics
/// If the page has no form token.
pub fn form_token(page: &str) -> String {
    let at = page
        .find("name=\"token\" value=\"")
        .unwrap_or_else(|| panic!("a form token in: {page}"))
        + 20;
    page[at..].split('"').next().unwrap_or("").to_string()
}

/// `application/x-www-form-urlencoded` encoding of `s`.
pub fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b' ' => "+".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Drive `mozart mcp` over stdio (newline-delimited JSON-RPC, the MCP stdio transport):
/// initialize, then one `tools/call` per entry; the replies to the calls.
///
/// # Panics
/// If `mozart mcp` cannot be run or answers out of protocol.
pub fn mcp_calls(env: &TestEnv, calls: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let requests: Vec<(&str, serde_json::Value)> =
        calls.iter().map(|c| ("tools/call", c.clone())).collect();
    mcp_requests(env, &requests)
}

/// Like [`mcp_calls`], with any request: `(method, params)` each; the replies.
///
/// # Panics
/// If `mozart mcp` cannot be run or answers out of protocol.
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub fn mcp_requests(
    env: &TestEnv,
    requests: &[(&str, serde_json::Value)],
) -> Vec<serde_json::Value> {
    let mut child = env
        .command(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start mozart mcp");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: serde_json::Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    let mut reply_to = |id: u64| -> serde_json::Value {
        for line in lines.by_ref() {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            if v["id"] == id {
                return v;
            }
        }
        panic!("mozart mcp closed without answering request {id}");
    };
    send(
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "security-test", "version": "1"}}}),
    );
    let init = reply_to(0);
    assert!(init.get("result").is_some(), "{init}");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut replies = Vec::new();
    for (i, (method, params)) in requests.iter().enumerate() {
        let id = i as u64 + 1;
        send(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        replies.push(reply_to(id));
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    replies
}
