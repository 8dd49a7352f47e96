//! `fairshare submit`'s exit status against a real nats-server: 0 accepted, 1 rejected, 3 when
//! the outcome is not known, with the key to retry with printed (a retry with a new key could
//! make a second job).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Output;

use fairshare_e2e::{CLUSTER, Stack};

/// Runs the CLI binary's `submit` for a 1-GPU job of `allocation`, with `--key` if given.
async fn submit(stack: &Stack, allocation: &str, key: Option<&str>) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command.args([
        "submit",
        "--nats-url",
        &stack.server.url(),
        "--cluster",
        CLUSTER,
        "--allocation",
        allocation,
        "--min-runtime",
        "15m",
    ]);
    if let Some(key) = key {
        command.args(["--key", key]);
    }
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn with_no_answer_submit_exits_3_and_names_the_generated_key_to_retry_with() {
    let mut stack = Stack::start().await.unwrap();
    let out = submit(&stack, "research/nlp", None).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let key = stderr
        .split("retry with --key ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no key in {stderr:?}"));
    assert!(key.starts_with("cli-"), "{stderr}");

    // The key printed is the one to retry with: the same submission under it is accepted once
    // the service answers.
    stack.start_submission(Default::default()).await.unwrap();
    let retried = submit(&stack, "research/nlp", Some(key)).await;
    assert_eq!(
        retried.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&retried.stderr)
    );

    // A rejection is final: exit 1, and no key to retry with.
    let rejected = submit(&stack, "no/such/allocation", None).await;
    let stderr = String::from_utf8_lossy(&rejected.stderr);
    assert_eq!(rejected.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("UNKNOWN_ALLOCATION"), "{stderr}");
    assert!(!stderr.contains("retry with --key"), "{stderr}");
}
