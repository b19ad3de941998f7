//! Torture (b): 200 concurrent clients hammer `job.status`, `job.list`, `daemon.status` and
//! `job.submit` while jobs run; every call is answered without a protocol error, every
//! submitted job is accepted and completes (conductor.md §7.3, §8).
//!
//! Short mode: 200 clients × 6 calls, 20 of them submitting. Long mode
//! (`MOZART_TORTURE_LONG=1`): 200 clients × 60 calls, 50 submitting.

use crate::support;

use std::time::{Duration, Instant};

use mozart_ipc::{methods, Client};
use mozart_tests::TestEnv;
use serde_json::{json, Value};
use support::*;

#[test]
fn two_hundred_clients_hammer_status_list_and_submit_while_jobs_run() {
    let env = TestEnv::new();
    let long = long_mode();
    let (clients, calls, submitters) = if long { (200, 60, 50) } else { (200, 6, 20) };
    env.start_conductor();

    // Jobs already running while the clients arrive.
    let mut ids = Vec::new();
    for (i, shape) in [Shape::Sequential(4), Shape::FanOut(3), Shape::Parallel(4)]
        .into_iter()
        .enumerate()
    {
        let name = format!("busy-{i}");
        let (score, _) = shell_score(&env, &name, shape, 0.5);
        assert_eq!(submit(&env, &score)["status"], "accepted");
        ids.push(name);
    }
    // One quick score per submitting client, written before the storm.
    let submit_scores: Vec<String> = (0..submitters)
        .map(|i| {
            let (score, _) = shell_score(&env, &format!("quick-{i}"), Shape::Sequential(1), 0.0);
            score.display().to_string()
        })
        .collect();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let (answered, errors): (usize, Vec<String>) = runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..clients {
            let socket = env.socket.clone();
            let watched = ids[c % ids.len()].clone();
            let own_score = submit_scores.get(c).cloned();
            tasks.spawn(async move {
                let mut errors = Vec::new();
                let mut ok = 0usize;
                let mut client = match Client::connect(&socket).await {
                    Ok(client) => client,
                    Err(e) => return (0, vec![format!("client {c}: connect: {e}")]),
                };
                client.set_response_timeout(Duration::from_secs(60));
                for k in 0..calls {
                    let (method, params) = match (k % 4, &own_score) {
                        (0, Some(score)) if k == 0 => {
                            (methods::JOB_SUBMIT, json!({"config_path": score}))
                        }
                        (0, _) => (methods::DAEMON_STATUS, json!({})),
                        (1, _) => (methods::JOB_STATUS, json!({"job_id": watched})),
                        (2, _) => (methods::JOB_LIST, json!({})),
                        _ => (methods::DAEMON_HEALTH, json!({})),
                    };
                    match client.call_value(method, params).await {
                        Ok(v) => {
                            if method == methods::JOB_SUBMIT && v["status"] != "accepted" {
                                errors.push(format!("client {c}: submit not accepted: {v}"));
                            } else if method == methods::JOB_LIST && !v.is_array() {
                                errors.push(format!("client {c}: job.list not a list: {v}"));
                            } else {
                                ok += 1;
                            }
                        }
                        Err(e) => errors.push(format!("client {c} call {k} {method}: {e}")),
                    }
                }
                (ok, errors)
            });
        }
        let mut total = 0;
        let mut errors = Vec::new();
        while let Some(done) = tasks.join_next().await {
            let (ok, errs) = done.unwrap();
            total += ok;
            errors.extend(errs);
        }
        (total, errors)
    });
    eprintln!(
        "{answered} calls answered by {clients} clients in {:?}",
        started.elapsed()
    );
    assert!(
        errors.is_empty(),
        "{} errors, first: {:#?}",
        errors.len(),
        &errors[..errors.len().min(10)]
    );
    assert_eq!(answered, clients * calls);

    ids.extend((0..submitters).map(|i| format!("quick-{i}")));
    let docs = wait_all_terminal(&env, &ids, if long { 600 } else { 120 });
    for (id, doc) in ids.iter().zip(&docs) {
        assert_eq!(doc["status"], "completed", "{id}: {doc:#}");
    }
    let list: Value = mozart_ipc::BlockingClient::connect(&env.socket)
        .unwrap()
        .call_value(methods::JOB_LIST, json!({}))
        .unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(ids.len()), "{list:#}");
    assert_eq!(integrity_check(&env.home.join("registry.db")), "ok");
}
