//! Torture (d): garbage on the conductor's socket — truncated lines, invalid UTF-8, random
//! binary lines, a 100 MB line, slow-loris senders, a client that never reads its answers —
//! while a well-behaved client keeps calling. The good client is always answered promptly,
//! every bad line that completes gets a JSON-RPC error, and the conductor keeps running jobs
//! (conductor.md §7.2–§7.5; architecture invariant 7).

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mozart_ipc::methods;
use mozart_tests::TestEnv;
use serde_json::{json, Value};
use support::*;

/// Read one reply line (10 s limit) and parse it.
fn reply(stream: &UnixStream) -> Value {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad reply {line:?}: {e}"))
}

/// Calls `daemon.status` on a fresh connection every 50 ms until `stop`; returns the
/// number of calls, the failures and the slowest answer.
fn good_client(
    socket: PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(usize, Vec<String>, Duration)> {
    std::thread::spawn(move || {
        let mut calls = 0;
        let mut failures = Vec::new();
        let mut slowest = Duration::ZERO;
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let result = mozart_ipc::BlockingClient::connect(&socket)
                .and_then(|mut c| c.call_value(methods::DAEMON_STATUS, json!({})));
            slowest = slowest.max(started.elapsed());
            calls += 1;
            if let Err(e) = result {
                failures.push(e.to_string());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        (calls, failures, slowest)
    })
}

fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    std::thread::spawn(f)
}

/// Truncated requests: half a line, then the connection closes.
fn truncated(socket: &Path, rng: &mut Rng) {
    let full = br#"{"jsonrpc":"2.0","method":"daemon.status","params":{},"id":1}"#;
    for _ in 0..20 {
        let mut s = UnixStream::connect(socket).unwrap();
        let cut = rng.range(1, full.len() as u64) as usize;
        let _ = s.write_all(&full[..cut]);
    }
}

/// Lines that are not UTF-8 or not JSON at all: each gets a parse error with `id: null`.
fn binary_lines(socket: &Path, rng: &mut Rng) {
    let mut s = UnixStream::connect(socket).unwrap();
    let mut lines: Vec<Vec<u8>> = vec![
        b"\xff\xfe{\"method\":\"daemon.status\",\"id\":1}".to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"method\":\"daemon.status\xc3\",\"id\":2}".to_vec(),
        b"\x00\x00\x00".to_vec(),
    ];
    for _ in 0..50 {
        let len = rng.range(1, 300) as usize;
        let line: Vec<u8> = (0..len)
            .map(|_| (rng.next() % 256) as u8)
            .filter(|b| *b != b'\n')
            .collect();
        // A random line can be JSON by chance (a lone digit): that is an invalid request
        // (-32600), not garbage, so it is left out here.
        let is_json = serde_json::from_slice::<Value>(&line).is_ok();
        if !line.is_empty() && !line.iter().all(u8::is_ascii_whitespace) && !is_json {
            lines.push(line);
        }
    }
    for line in &lines {
        s.write_all(line).unwrap();
        s.write_all(b"\n").unwrap();
        let r = reply(&s);
        assert_eq!(r["error"]["code"], -32700, "line {line:?} → {r}");
        assert_eq!(r["id"], Value::Null);
    }
    // The same connection still serves a good request afterwards.
    s.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"daemon.hello\",\"id\":77}\n")
        .unwrap();
    assert_eq!(reply(&s)["id"], 77);
}

/// A 100 MB line: refused with a parse error once past the 16 MiB limit, connection closed,
/// and the conductor never buffers it all.
fn huge_line(socket: &Path) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let chunk = vec![b'a'; 1024 * 1024];
    let mut sent = 0usize;
    for _ in 0..100 {
        if s.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    assert!(
        sent < 100 * 1024 * 1024,
        "the conductor read all 100 MB of one line"
    );
    let r = reply(&s);
    assert_eq!(r["error"]["code"], -32700, "{r}");
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
}

/// Slow-loris: a request line dribbled one byte at a time. The conductor gives up on it
/// after its line timeout (15 s) instead of holding the slot forever.
fn slow_loris(socket: &Path, budget: Duration) -> Option<Duration> {
    let mut s = UnixStream::connect(socket).unwrap();
    let started = Instant::now();
    let line = br#"{"jsonrpc":"2.0","method":"daemon.status","params":{"padding":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},"id":1}"#;
    for b in line.iter().cycle() {
        if started.elapsed() > budget {
            return None;
        }
        if s.write_all(&[*b]).is_err() {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

/// A client that pipelines requests and never reads: only its own connection stalls.
fn never_reads(socket: &Path) -> UnixStream {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let req = b"{\"jsonrpc\":\"2.0\",\"method\":\"job.list\",\"id\":1}\n";
    for _ in 0..20_000 {
        if s.write_all(req).is_err() {
            break;
        }
    }
    s
}

#[test]
fn garbage_on_the_socket_never_disturbs_a_good_client() {
    let env = TestEnv::new();
    let mut rng = Rng::from_env("garbage");
    env.start_conductor();
    let (score, ws) = shell_score(&env, "steady", Shape::Sequential(6), 0.5);
    assert_eq!(submit(&env, &score)["status"], "accepted");

    let stop = Arc::new(AtomicBool::new(false));
    let good = good_client(env.socket.clone(), stop.clone());

    let socket = env.socket.clone();
    let loris: Vec<_> = (0..4)
        .map(|_| {
            let socket = socket.clone();
            spawn(move || slow_loris(&socket, Duration::from_secs(40)))
        })
        .collect();
    let stalled = never_reads(&env.socket);
    let mut rng2 = rng.clone();
    let s = socket.clone();
    let t1 = spawn(move || truncated(&s, &mut rng2));
    let s = socket.clone();
    let mut rng3 = Rng::new(rng.next());
    let t2 = spawn(move || binary_lines(&s, &mut rng3));
    let s = socket.clone();
    let t3 = spawn(move || huge_line(&s));
    t1.join().unwrap();
    t2.join().unwrap();
    t3.join().unwrap();
    for (i, l) in loris.into_iter().enumerate() {
        let cut = l.join().unwrap();
        assert!(
            cut.is_some_and(|d| d < Duration::from_secs(25)),
            "slow-loris {i} was never cut off ({cut:?})"
        );
    }
    drop(stalled);

    stop.store(true, Ordering::Relaxed);
    let (calls, failures, slowest) = good.join().unwrap();
    eprintln!("good client: {calls} calls, slowest {slowest:?}");
    assert!(failures.is_empty(), "good client failed: {failures:#?}");
    assert!(calls > 20, "good client made only {calls} calls");
    assert!(
        slowest < Duration::from_secs(5),
        "good client waited {slowest:?}"
    );

    let doc = wait_all_terminal(&env, &["steady".to_string()], 60).remove(0);
    assert_eq!(doc["status"], "completed", "{doc:#}");
    assert!(ws.join("out-6.txt").exists());
    let pid = env.conductor_pid().unwrap();
    assert!(mozart_tests::alive(pid));
}

/// Connections that never send a byte each hold one of the conductor's `socket.backlog`
/// slots (default 64) until the 300 s idle timeout, so 64 of them lock every CLI call out.
#[test]
fn idle_connections_do_not_lock_out_the_cli() {
    let env = TestEnv::new();
    env.start_conductor();
    let idle: Vec<UnixStream> = (0..80)
        .map(|_| UnixStream::connect(&env.socket).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let out = env.mozart(&["conductor-status"]);
    let took = started.elapsed();
    drop(idle);
    assert_eq!(out.status.code(), Some(0), "{}", mozart_tests::stdout(&out));
    assert!(
        took < Duration::from_secs(5),
        "conductor-status took {took:?}"
    );
}
