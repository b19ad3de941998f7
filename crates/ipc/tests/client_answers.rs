//! How the client picks its answer out of what a conductor sends on the connection: other
//! lines (notifications, answers to other ids, JSON that is no envelope) are passed over,
//! an error object is an error, a missing or null result is `null`.
#![allow(clippy::unwrap_used)]

use mozart_ipc::{Client, IpcError};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// A conductor that answers the n-th request with the n-th list of lines.
fn scripted(answers: Vec<Vec<String>>) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let listener = UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        for answer in answers {
            let Ok(Some(_request)) = lines.next_line().await else {
                return;
            };
            for line in answer {
                write.write_all(line.as_bytes()).await.unwrap();
                write.write_all(b"\n").await.unwrap();
            }
        }
    });
    (dir, path)
}

#[tokio::test]
async fn the_answer_to_our_id_is_found_among_other_lines() {
    let status = json!({"job_name": "big", "sheets": {"1": {"status": "completed"}}, "note": "é \" \\ \u{1}"});
    let (_dir, path) = scripted(vec![
        vec![
            // JSON that is not an envelope, a notification, an answer to another call.
            "[1, 2]".into(),
            json!({"jsonrpc": "2.0", "method": "monitor.event", "params": {"x": 1}}).to_string(),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"wrong": true}}).to_string(),
            json!({"jsonrpc": "2.0", "id": null, "result": {"wrong": true}}).to_string(),
            json!({"jsonrpc": "2.0", "id": 1, "result": status}).to_string(),
        ],
        vec![
            json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32001, "message": "Job not found: x", "data": {"job_id": "x"}}}).to_string(),
        ],
        vec![json!({"jsonrpc": "2.0", "id": 3, "result": null}).to_string()],
        vec![json!({"jsonrpc": "2.0", "id": 4}).to_string()],
        vec!["{not json".into()],
    ]);
    let mut client = Client::connect(&path).await.unwrap();

    // A typed call is decoded from the answer's text as it came.
    let got: Value = client.call("job.status", json!({})).await.unwrap();
    assert_eq!(got, status);

    match client.call_value("job.status", json!({})).await {
        Err(IpcError::Rpc { method, error }) => {
            assert_eq!(method, "job.status");
            assert_eq!(error.code, -32001);
            assert_eq!(error.message, "Job not found: x");
            assert_eq!(error.data, Some(json!({"job_id": "x"})));
        }
        other => panic!("expected the conductor's error, got {other:?}"),
    }

    assert_eq!(client.call_value("a", ()).await.unwrap(), Value::Null);
    let none: Option<u32> = client.call("b", ()).await.unwrap();
    assert_eq!(none, None);

    match client.call_value("c", ()).await {
        Err(IpcError::Protocol { detail, .. }) => {
            assert!(detail.contains("response is not JSON"), "{detail}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_result_of_the_wrong_shape_names_the_method() {
    let (_dir, path) = scripted(vec![vec![
        json!({"jsonrpc": "2.0", "id": 1, "result": {"count": "three"}}).to_string(),
    ]]);
    let mut client = Client::connect(&path).await.unwrap();
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Count {
        count: u32,
    }
    match client.call::<_, Count>("job.count", ()).await {
        Err(IpcError::Protocol { method, detail }) => {
            assert_eq!(method, "job.count");
            assert!(detail.contains("unexpected result shape"), "{detail}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}
