//! `fairshare queue` against a real nats-server and the decision service: the job that waits
//! is listed first with why, then the placed ones; a filter takes an account's jobs, and a
//! filter naming no account is refused (exit 1) rather than shown as an empty queue.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common::{stderr, stdout};

use std::process::Output;
use std::time::Duration;

use fairshare_decision::shell as decision;
use fairshare_e2e::{CLUSTER, Stack};
use fairshare_events::pb;
use fairshare_events::{codec, subjects};

async fn queue(stack: &Stack, extra: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command
        .args([
            "queue",
            "--cluster",
            CLUSTER,
            "--nats-url",
            &stack.server.url(),
        ])
        .args(extra);
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn the_waiting_job_is_listed_first_with_why_then_the_placed_ones() {
    let mut stack = Stack::start().await.unwrap();
    stack.start_submission(Default::default()).await.unwrap();
    // One 8-GPU job more than the 4 x 8 cluster holds: one has to wait.
    let ids = stack.submit_one_too_many().await.unwrap();
    let service = stack
        .serve_decision(decision::Config::new(CLUSTER))
        .await
        .unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let text = loop {
        let listed = queue(&stack, &["--why"]).await;
        let text = stdout(&listed);
        let placed = text
            .lines()
            .filter(|l| l.contains(" placed ") && !l.starts_with("for:"));
        if listed.status.success() && placed.count() == 4 {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "four jobs were not listed as placed: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!("cluster {CLUSTER}: 5 live jobs")),
        "{text}"
    );
    // The one left waiting (a vision job: infra's outranks vision's fourth), then its reason
    // in words, then the four placed.
    let waiting = lines[2];
    assert!(
        waiting.contains("research/vision") && waiting.contains(" queued "),
        "{text}"
    );
    assert!(waiting.ends_with("reservation_pending"), "{text}");
    assert!(
        lines[3].starts_with("    "),
        "--why gives the sentence: {text}"
    );
    let placed: Vec<&str> = lines[4..8].to_vec();
    assert!(placed.iter().all(|l| l.contains(" placed ")), "{text}");
    for id in &ids {
        assert_eq!(text.matches(id.as_str()).count(), 1, "{id} once: {text}");
    }

    // One account's jobs only.
    let infra = stdout(&queue(&stack, &["--allocation", "infra"]).await);
    assert!(
        infra.starts_with(&format!("cluster {CLUSTER}: 1 live job ")),
        "{infra}"
    );
    assert!(infra.contains(&ids[4]), "{infra}");
    // One user's jobs: the test submitter's are all five; nobody else has any.
    let ada = stdout(&queue(&stack, &["--user", "ada"]).await);
    assert!(
        ada.starts_with(&format!("cluster {CLUSTER}: 5 live jobs")),
        "{ada}"
    );
    let nobody = stdout(&queue(&stack, &["--user", "grace"]).await);
    assert!(
        nobody.starts_with(&format!("cluster {CLUSTER}: 0 live jobs")),
        "{nobody}"
    );
    // For programs: the schema's listing as JSON.
    let json = queue(&stack, &["--json", "--allocation", "infra"]).await;
    let listing: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(listing["matched"], 1, "{listing}");
    assert_eq!(listing["jobs"][0]["job_id"], ids[4].as_str(), "{listing}");
    assert_eq!(listing["jobs"][0]["status"], "placed", "{listing}");
    // A program's request with every field at its default is encoded as no bytes: every job.
    let reply = stack
        .client
        .request(subjects::queue_api(CLUSTER), bytes::Bytes::new())
        .await
        .unwrap();
    match codec::decode_queue_reply(&reply.payload).unwrap().result {
        Some(pb::queue_reply::Result::Listing(l)) => assert_eq!((l.matched, l.jobs.len()), (5, 5)),
        other => panic!("expected the whole listing, got {other:?}"),
    }
    // Bytes that are no QueueRequest are refused as malformed.
    let reply = stack
        .client
        .request(
            subjects::queue_api(CLUSTER),
            bytes::Bytes::from_static(b"\xff\xff"),
        )
        .await
        .unwrap();
    match codec::decode_queue_reply(&reply.payload).unwrap().result {
        Some(pb::queue_reply::Result::Rejected(r)) => {
            assert_eq!(r.code, pb::RejectionCode::Malformed as i32)
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    // A limit says how many it left out.
    let two = stdout(&queue(&stack, &["--limit", "2"]).await);
    assert!(two.contains("2 of 5 live jobs shown"), "{two}");
    // A typo is refused by name, not shown as an empty queue.
    let typo = queue(&stack, &["--allocation", "research/visio"]).await;
    assert_eq!(typo.status.code(), Some(1), "{typo:?}");
    let err = stderr(&typo);
    assert!(err.contains("no account \"research/visio\""), "{err}");

    service.stop().await.unwrap();
}

/// Nobody answers for a cluster without a decision service: the CLI says which service is
/// missing.
#[tokio::test]
async fn without_a_decision_service_the_listing_names_what_is_missing() {
    let stack = Stack::start().await.unwrap();
    let listed = queue(&stack, &[]).await;
    assert_eq!(listed.status.code(), Some(1));
    let err = stderr(&listed);
    assert!(
        err.contains(&format!("the decision service of cluster {CLUSTER}")),
        "{err}"
    );
}
