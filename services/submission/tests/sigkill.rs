//! The submission service binary killed with SIGKILL at random moments (SPEC section 6: kill
//! any service at any moment, no submission lost, none applied twice) while launchers submit
//! by request/reply, retrying with the same key until answered, and through the durable
//! intake. It checkpoints every few entries here, so a kill can cut a write short; it is
//! restarted on the same checkpoint directory after each kill.
//!
//! Checked from the log at the end: every key has exactly one `JobSubmitted`, and each
//! request/reply key's is the job id its answer named.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use fairshare_events::pb::{self, RejectionCode, event::Body, submit_reply};
use fairshare_events::{codec, headers, subjects};
use fairshare_runtime::clock::{Clock, SystemClock};
use fairshare_testkit::events::append;
use fairshare_testkit::process::{
    assert_restarts_resumed, checkpointed, eventually, kill_and_read_stderr, spawn_service,
};
use fairshare_testkit::{NatsServer, Rng};

const CLUSTER: &str = "k";
const REQUESTS: usize = 30;
const INTAKE: usize = 10;

fn request(key: &str) -> pb::SubmitRequest {
    pb::SubmitRequest {
        idempotency_key: key.into(),
        spec: Some(pb::JobSpec {
            cluster: CLUSTER.into(),
            allocation: "a".into(),
            user: "u".into(),
            gpus: 1,
            min_runtime_s: 600,
            resumable: true,
            ..Default::default()
        }),
    }
}

/// The submission binary on `url`, checkpointing into `dir` every 2 entries.
fn spawn(url: &str, dir: &std::path::Path) -> Child {
    let args = checkpointed(url, dir, 2, &[]);
    spawn_service(env!("CARGO_BIN_EXE_fairshare-submission"), args)
}

/// Asks until the service answers `key` with an acceptance (a launcher's loop: no answer and
/// `UNAVAILABLE` say nothing was decided, and the same key again is safe); the job id.
async fn submit_until_accepted(client: &async_nats::Client, key: &str) -> String {
    let body = codec::encode(&request(key));
    loop {
        let answer = tokio::time::timeout(
            Duration::from_millis(500),
            client.request(subjects::SUBMIT_API, body.clone()),
        )
        .await;
        if let Ok(Ok(message)) = answer {
            match codec::decode_submit_reply(&message.payload).unwrap().result {
                Some(submit_reply::Result::Accepted(a)) => return a.job_id,
                Some(submit_reply::Result::Rejected(r))
                    if r.code == RejectionCode::Unavailable as i32 => {}
                other => panic!("{key}: {other:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn killed_with_sigkill_at_random_moments_it_loses_and_doubles_no_submission() {
    let (server, js) = NatsServer::with_streams().await;
    let client = async_nats::connect(server.url()).await.unwrap();
    let at = SystemClock.now_ms();
    let setup = [
        (
            subjects::policy(CLUSTER),
            Body::BudgetTreeSet(pb::BudgetTreeSet {
                cluster: CLUSTER.into(),
                accounts: vec![pb::Account {
                    name: "a".into(),
                    share: 1,
                    children: vec![],
                }],
            }),
        ),
        (
            subjects::node(CLUSTER, "n0"),
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: CLUSTER.into(),
                node: "n0".into(),
                gpus: 8,
            }),
        ),
    ];
    for (subject, body) in setup {
        append(&js, subject, at, body).await;
    }

    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn(&server.url(), dir.path());
    // Launchers submit on their own task, a few every second; some through the intake.
    let submitter = {
        let client = client.clone();
        let js = js.clone();
        tokio::spawn(async move {
            let mut answered = BTreeMap::new();
            for i in 0..REQUESTS {
                let key = format!("rr-{i}");
                let id = submit_until_accepted(&client, &key).await;
                answered.insert(key, id);
                tokio::time::sleep(Duration::from_millis(100)).await;
                if i % 3 == 0 {
                    let key = format!("in-{}", i / 3);
                    let mut h = async_nats::HeaderMap::new();
                    h.insert(headers::MESSAGE_ID, headers::submission_id(&key).as_str());
                    h.insert(headers::IDEMPOTENCY_KEY, key.as_str());
                    js.publish_with_headers(
                        subjects::intake(CLUSTER),
                        h,
                        codec::encode(&request(&key)),
                    )
                    .await
                    .unwrap()
                    .await
                    .unwrap();
                }
            }
            answered
        })
    };
    let mut rng = Rng(0x5ab0_c11e_d5ee_d001);
    let mut logs = Vec::new();
    // Kills until the submitter is done, for at most 60 s (then the run ends with the service
    // up: a machine too slow to answer between kills still finishes).
    let kill_until = tokio::time::Instant::now() + Duration::from_secs(60);
    while !submitter.is_finished() && tokio::time::Instant::now() < kill_until {
        tokio::time::sleep(Duration::from_millis(150 + rng.below(500))).await;
        logs.push(kill_and_read_stderr(child));
        child = spawn(&server.url(), dir.path());
    }
    let answered = tokio::time::timeout(Duration::from_secs(60), submitter)
        .await
        .expect("every submission answered within a minute of the last kill")
        .unwrap();
    let kills = logs.len();
    assert!(kills >= 3, "only {kills} kills");

    // The intake drains once the last incarnation runs; then every key is in the log once.
    // (A kill between an intake message's delivery and its acknowledgement leaves it to be
    // redelivered after the consumer's 30 s acknowledgement wait.)
    let read_keys = || async {
        let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for entry in fairshare_testkit::events::stored(&js).await {
            if let Some(Body::JobSubmitted(s)) = entry.event.body {
                by_key.entry(s.idempotency_key).or_default().push(s.job_id);
            }
        }
        by_key
    };
    eventually(Duration::from_secs(50), || async {
        let keys = read_keys().await.len();
        if keys >= REQUESTS + INTAKE {
            Ok(())
        } else {
            Err(format!("{keys} of {} keys in the log", REQUESTS + INTAKE))
        }
    })
    .await;
    // Time for a restarted incarnation to apply something twice, if it were to; then the log
    // is read again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    logs.push(kill_and_read_stderr(child));
    let by_key = read_keys().await;
    assert_eq!(by_key.len(), REQUESTS + INTAKE, "{by_key:?}");
    for (key, ids) in &by_key {
        assert_eq!(ids.len(), 1, "{key} submitted {} times", ids.len());
        if let Some(id) = answered.get(key) {
            assert_eq!(&ids[0], id, "{key}: the log's job is the one answered");
        }
    }
    let resumed = assert_restarts_resumed(&logs);
    eprintln!(
        "sigkill: {kills} kills, {resumed} starts resumed from a checkpoint, {} keys",
        by_key.len()
    );
}
