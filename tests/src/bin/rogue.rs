//! `mozart-rogue`: another local user's program for the socket tests (issue 21).
//!
//! * `listen SOCKET RECORD DIR_MODE`: pose as a conductor. Creates SOCKET's directory when
//!   missing, sets it to DIR_MODE (octal), listens on SOCKET (mode 0666, so anyone can
//!   connect), appends `CONNECT` and then every request line it receives to RECORD, and
//!   answers the way a conductor would (`daemon.health` ok, `job.submit` accepted, …), so a
//!   client that trusts it goes all the way. Prints `listening` once ready.
//! * `call SOCKET METHOD`: send one JSON-RPC request and print the answer line (or
//!   `ERROR: …` and exit 1 when the connection fails or closes without an answer).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let result = match (args.get(1).map(String::as_str), args.len()) {
        (Some("listen"), 5) => listen(&args[2], &args[3], &args[4]),
        (Some("call"), 4) => call(&args[2], &args[3]),
        _ => Err("usage: mozart-rogue listen SOCKET RECORD DIR_MODE | call SOCKET METHOD".into()),
    };
    if let Err(err) = result {
        println!("ERROR: {err}");
        std::process::exit(1);
    }
}

fn listen(socket: &str, record: &str, dir_mode: &str) -> Result<(), String> {
    let socket = Path::new(socket);
    let mode = u32::from_str_radix(dir_mode, 8).map_err(|e| format!("mode {dir_mode}: {e}"))?;
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    }
    let listener = UnixListener::bind(socket).map_err(|e| format!("bind: {e}"))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("chmod socket: {e}"))?;
    let record = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(record)
            .map_err(|e| format!("{record}: {e}"))?,
    ));
    println!("listening");
    let _ = std::io::stdout().flush();
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let record = record.clone();
        std::thread::spawn(move || serve(stream, &record));
    }
    Ok(())
}

fn note(record: &Mutex<std::fs::File>, line: &str) {
    if let Ok(mut file) = record.lock() {
        let _ = writeln!(file, "{line}");
        let _ = file.flush();
    }
}

fn serve(stream: UnixStream, record: &Mutex<std::fs::File>) {
    note(record, "CONNECT");
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        note(record, &line);
        let request: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        let id = request.get("id").cloned().unwrap_or_default();
        let method = request.get("method").and_then(|m| m.as_str()).unwrap_or("");
        let result = match method {
            "daemon.health" => serde_json::json!({
                "status": "ok", "pid": std::process::id(), "uptime_seconds": 1.0,
                "shutting_down": false,
            }),
            "daemon.ready" => serde_json::json!({
                "status": "ready", "running_jobs": 0, "memory_mb": 1.0, "child_processes": 0,
                "accepting_work": true, "shutting_down": false, "failure_rate_elevated": false,
                "notifications_degraded": false, "uptime_seconds": 1.0,
            }),
            "job.submit" => serde_json::json!({
                "job_id": "stolen", "status": "accepted", "message": null,
            }),
            "job.list" => serde_json::json!([]),
            _ => serde_json::json!({}),
        };
        let answer = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result});
        if writeln!(writer, "{answer}").is_err() {
            return;
        }
    }
}

fn call(socket: &str, method: &str) -> Result<(), String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let request = serde_json::json!({"jsonrpc": "2.0", "method": method, "params": {}, "id": 1});
    // A conductor that refuses the peer answers at once and closes, maybe before the
    // request is written: a failed send still leaves its answer to read.
    let sent = writeln!(stream, "{request}");
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    if answer.is_empty() {
        return Err(match sent {
            Err(e) => format!("send: {e}"),
            Ok(()) => "the connection closed without an answer".into(),
        });
    }
    print!("{answer}");
    Ok(())
}
