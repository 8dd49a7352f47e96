//! `fairshare leases` against a real nats-server: nothing before any deciding service has
//! started; then the lease a running decision service holds, for its cluster only.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common::stdout;

use std::process::Output;
use std::time::Duration;

use fairshare_e2e::{CLUSTER, Stack};
use fairshare_runtime::lease;

async fn leases(stack: &Stack, args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command
        .args(["leases", "--nats-url", &stack.server.url()])
        .args(args);
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn leases_name_the_instance_that_decides_for_each_cluster() {
    let stack = Stack::start().await.unwrap();
    let none = leases(&stack, &[]).await;
    assert!(none.status.success());
    assert!(stdout(&none).starts_with("no leases:"), "{}", stdout(&none));

    let serving = stack
        .serve_decision(fairshare_decision::shell::Config::new(CLUSTER))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let holder = loop {
        if let Some(h) = lease::holders(&stack.js)
            .await
            .unwrap()
            .unwrap_or_default()
            .pop()
        {
            break h.holder;
        }
        assert!(std::time::Instant::now() < deadline, "the lease was taken");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let held = leases(&stack, &["--cluster", CLUSTER]).await;
    assert!(held.status.success());
    let out = stdout(&held);
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("decision.{CLUSTER} ")))
        .unwrap_or_else(|| panic!("no lease line in {out}"));
    assert!(line.ends_with(&holder), "{line}");
    assert!(line.contains("s ago"), "{line}");

    let other = leases(&stack, &["--cluster", "other"]).await;
    assert!(other.status.success());
    assert!(
        stdout(&other).starts_with("no lease is held"),
        "{}",
        stdout(&other)
    );
    serving.stop().await.unwrap();
}
