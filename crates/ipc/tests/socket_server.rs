//! The framed server and the client over a real Unix socket.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use mozart_ipc::{
    error, methods, serve, Client, ErrorObjectOwned, IpcError, RpcModule, ServerLimits,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

fn module() -> RpcModule<()> {
    let mut module = RpcModule::new(());
    module
        .register_method(methods::DAEMON_HEALTH, |_, _, _| {
            Ok::<_, ErrorObjectOwned>(serde_json::json!({"status": "ok"}))
        })
        .unwrap();
    module
}

/// Start a server in the background; returns the socket path (kept alive by the TempDir).
fn start(limits: ServerLimits) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let listener = UnixListener::bind(&path).unwrap();
    tokio::spawn(serve(listener, module(), limits, std::future::pending()));
    (dir, path)
}

async fn raw_exchange(path: &std::path::Path, bytes: &[u8]) -> String {
    let mut stream = UnixStream::connect(path).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.unwrap();
    line
}

#[tokio::test]
async fn a_peer_with_another_uid_is_refused() {
    let me = nix::unistd::getuid().as_raw();
    let (_dir, path) = start(ServerLimits {
        allowed_uid: Some(me.wrapping_add(1)),
        // The tests may run as root, whom the conductor serves by default.
        allow_root: false,
        ..ServerLimits::default()
    });
    let mut client = Client::connect(&path).await.unwrap();
    let err = client
        .call::<_, serde_json::Value>(methods::DAEMON_HEALTH, ())
        .await
        .unwrap_err();
    let rpc = err.rpc_error().expect("an RPC error");
    assert_eq!(rpc.code, error::INVALID_REQUEST);
    assert!(rpc.message.contains("permission denied"), "{}", rpc.message);
}

#[tokio::test]
async fn the_owner_is_served_and_calls_pipeline_on_one_connection() {
    let (_dir, path) = start(ServerLimits::default());
    let mut client = Client::connect(&path).await.unwrap();
    for _ in 0..3 {
        let v: serde_json::Value = client.call(methods::DAEMON_HEALTH, ()).await.unwrap();
        assert_eq!(v["status"], "ok");
    }
    let err = client
        .call::<_, serde_json::Value>("daemon.nope", ())
        .await
        .unwrap_err();
    assert!(err.rpc_error().unwrap().is_method_not_found());
}

#[tokio::test]
async fn an_oversized_line_gets_a_parse_error_and_others_are_unaffected() {
    let (_dir, path) = start(ServerLimits {
        max_request_bytes: 1024,
        ..ServerLimits::default()
    });
    let mut big = vec![b'x'; 4096];
    big.push(b'\n');
    let reply = raw_exchange(&path, &big).await;
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["error"]["code"], error::PARSE_ERROR);
    let reply = raw_exchange(&path, b"\xff\xfe\n").await;
    assert!(reply.contains("-32700"), "{reply}");
    let mut client = Client::connect(&path).await.unwrap();
    let v: serde_json::Value = client.call(methods::DAEMON_HEALTH, ()).await.unwrap();
    assert_eq!(v["status"], "ok");
}

#[tokio::test]
async fn a_slow_loris_is_dropped_and_never_blocks_the_only_slot_for_long() {
    let (_dir, path) = start(ServerLimits {
        max_connections: 1,
        line_timeout: Duration::from_millis(200),
        idle_timeout: Duration::from_millis(300),
        ..ServerLimits::default()
    });
    let mut loris = UnixStream::connect(&path).await.unwrap();
    loris.write_all(b"{\"method\":").await.unwrap();
    let started = std::time::Instant::now();
    let mut client = Client::connect(&path).await.unwrap();
    let v: serde_json::Value = client.call(methods::DAEMON_HEALTH, ()).await.unwrap();
    assert_eq!(v["status"], "ok");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_missing_socket_reads_as_not_running() {
    let dir = tempfile::tempdir().unwrap();
    let err = Client::connect(dir.path().join("none.sock"))
        .await
        .unwrap_err();
    assert!(matches!(err, IpcError::NotRunning { .. }), "{err}");
    // A socket file nobody listens on (a conductor killed with -9) is "not running" too.
    let path = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let err = Client::connect(&path).await.unwrap_err();
    assert!(err.is_not_running(), "{err}");
}
