//! `fairshare explain` against a real nats-server and the decision service: a live job's
//! explanation and an ended job's answer from the log are each whole lines (a shell prompt or
//! the next command's output never runs onto them), and an id nobody submitted is an error.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common::{stderr, stdout};

use std::process::Output;
use std::time::Duration;

use fairshare_decision::shell as decision;
use fairshare_e2e::{CLUSTER, Stack, accepted, request};

async fn explain(stack: &Stack, job_id: &str) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command.args([
        "explain",
        "--cluster",
        CLUSTER,
        "--nats-url",
        &stack.server.url(),
        job_id,
    ]);
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap()
}

/// `explain` of `job_id` once its stdout satisfies `done` (the decision service folds the log
/// a moment after it is written).
async fn explain_until(stack: &Stack, job_id: &str, done: impl Fn(&str) -> bool) -> Output {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let out = explain(stack, job_id).await;
        if out.status.success() && done(&stdout(&out)) {
            return out;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no such explanation of {job_id}: {out:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_live_and_an_ended_job_are_each_explained_in_whole_lines() {
    let mut stack = Stack::start().await.unwrap();
    stack.start_submission(Default::default()).await.unwrap();
    let reply = stack.submit(&request("explain-1")).await.unwrap();
    let job_id = accepted(&reply).unwrap().job_id.clone();
    let service = stack
        .serve_decision(decision::Config::new(CLUSTER))
        .await
        .unwrap();

    let live = explain_until(&stack, &job_id, |s| {
        s.starts_with(&format!("job {job_id} ("))
    })
    .await;
    let text = stdout(&live);
    assert!(text.ends_with('\n'), "a live job's explanation: {text:?}");

    stack.cancel(&job_id).await.unwrap();
    let ended = explain_until(&stack, &job_id, |s| s.contains("is not live")).await;
    let text = stdout(&ended);
    assert!(
        text.starts_with(&format!("job {job_id} is not live: it was cancelled at ")),
        "{text:?}"
    );
    assert!(
        text.ends_with(")\n") && text.matches('\n').count() == 1,
        "an ended job's answer is one whole line: {text:?}"
    );

    // An id the log does not know is the caller's mistake, not an answer.
    let unknown = explain(&stack, "0190a5c0-0000-7000-8000-000000000000").await;
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");
    assert!(stdout(&unknown).is_empty(), "{unknown:?}");
    assert!(!stderr(&unknown).is_empty(), "{unknown:?}");
    service.stop().await.unwrap();
}
