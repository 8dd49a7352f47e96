//! `fairshare-decision --audit` into a reader that is already gone ends quietly with status
//! 141, as `fairshare audit` does, not with a panic.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Command;
use std::time::Duration;

use fairshare_testkit::{NatsServer, run_with_stdout_closed};

#[tokio::test]
async fn audit_into_a_closed_pipe_exits_quietly() {
    let server = NatsServer::start().unwrap();
    // The streams exist (empty): the audit reads them and has its summary line to write.
    server.jetstream(Duration::from_secs(5)).await.unwrap();
    let out = run_with_stdout_closed(
        Command::new(env!("CARGO_BIN_EXE_fairshare-decision")).args([
            "--audit",
            "--cluster",
            "c1",
            "--nats-url",
            &server.url(),
        ]),
    )
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}
