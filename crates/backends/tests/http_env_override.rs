//! `MOZART_ANTHROPIC_BASE_URL` / `MOZART_OLLAMA_BASE_URL` redirect the built-in profiles
//! (how black-box tests and gateways point Mozart at another server). Its own test binary
//! with a single test: it changes the process environment before any other thread reads it.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use mozart_backends::{ExecutionRequest, InstrumentRegistry};

/// Answer `count` requests with `body`; returns the base URL and the request paths seen.
fn serve(count: usize, body: &'static str) -> (String, thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = thread::spawn(move || {
        let mut paths = Vec::new();
        for _ in 0..count {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            paths.push(line.split_whitespace().nth(1).unwrap().to_string());
            let mut len = 0;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            reader.read_exact(&mut vec![0; len]).unwrap();
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
        paths
    });
    (url, handle)
}

#[test]
fn base_url_environment_variables_redirect_the_native_profiles() {
    let (anthropic_url, anthropic) = serve(
        1,
        r#"{"content":[{"type":"text","text":"from env"}],"usage":{"input_tokens":1,"output_tokens":1}}"#,
    );
    let (ollama_url, ollama) = serve(1, r#"{"message":{"content":"local"},"eval_count":1}"#);
    std::env::set_var("MOZART_ANTHROPIC_BASE_URL", &anthropic_url);
    std::env::set_var("MOZART_OLLAMA_BASE_URL", &ollama_url);
    std::env::set_var("MOZART_HTTP_ENV_TEST_KEY", "k");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let reg = InstrumentRegistry::builtin().unwrap();
    let mut req = ExecutionRequest::new("hi", std::env::temp_dir(), Duration::from_secs(10));
    req.options
        .insert("api_key_env".into(), "MOZART_HTTP_ENV_TEST_KEY".into());
    let r = rt.block_on(reg.backend("anthropic_api").unwrap().execute(req));
    assert!(r.success, "{r:?}");
    assert_eq!(r.output_text(), "from env");

    let req = ExecutionRequest::new("hi", std::env::temp_dir(), Duration::from_secs(10));
    let r = rt.block_on(reg.backend("ollama").unwrap().execute(req));
    assert!(r.success, "{r:?}");
    assert_eq!(r.output_text(), "local");

    assert_eq!(anthropic.join().unwrap(), vec!["/v1/messages"]);
    assert_eq!(ollama.join().unwrap(), vec!["/api/chat"]);
}
