//! `fairshare explain` against a real nats-server and the decision service: a live job's
//! explanation and an ended job's answer from the log are each whole lines (a shell prompt or
//! the next command's output never runs onto them), and an id nobody submitted is an error,
//! told apart from a log that cannot be read.

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

/// An identity that may not read single events from the log (here: the launcher's, with those
/// subjects taken out of its permissions) asks about a job the decision service does not hold:
/// the answer says the log could not be read, not that no such job was ever submitted.
#[tokio::test]
async fn a_job_is_not_called_unknown_when_the_log_cannot_be_read() {
    use fairshare_events::streams::EVENTS_STREAM;
    use fairshare_model::files;
    use fairshare_runtime::auth::{self, Role};
    use fairshare_runtime::nats::Identity;
    let dir = tempfile::tempdir().unwrap();
    let mut block = auth::init(dir.path()).unwrap();
    for subject in [
        format!("$JS.API.STREAM.MSG.GET.{EVENTS_STREAM}"),
        format!("$JS.API.DIRECT.GET.{EVENTS_STREAM}"),
        format!("$JS.API.DIRECT.GET.{EVENTS_STREAM}.>"),
    ] {
        // Each is listed for the launcher and for the services; the block lists the
        // launcher's after theirs, so only its own occurrences are taken out here.
        let launcher = block.find("# launcher").unwrap();
        let (head, tail) = block.split_at(launcher);
        let tail = tail.replace(&format!(", \"{subject}\""), "");
        block = format!("{head}{tail}");
    }
    let server = fairshare_testkit::NatsServer::start_with_config(&block).unwrap();
    let operator_seed = auth::seed_path(dir.path(), Role::Operator);
    let op = fairshare_runtime::nats::connect(&server.url(), "op", Identity::Nkey(&operator_seed))
        .await
        .unwrap();
    let js = async_nats::jetstream::new(op.clone());
    fairshare_runtime::nats::ensure_streams(&js, 1)
        .await
        .unwrap();
    fairshare_runtime::admin::set_budget(
        &js,
        1,
        files::parse_budget(fairshare_e2e::BUDGET).unwrap(),
    )
    .await
    .unwrap();
    let service = decision::Service::start(
        op,
        decision::Config::new(CLUSTER),
        std::sync::Arc::new(fairshare_runtime::clock::SystemClock),
    )
    .await
    .unwrap();
    let serving = tokio::spawn(service.serve(std::future::pending()));

    let ask = |role: Role| {
        let seed = auth::seed_path(dir.path(), role);
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
        command
            .args(["explain", "--cluster", CLUSTER, "--nats-url", &server.url()])
            .arg("--nats-nkey")
            .arg(seed)
            .arg("01a23c8a-4149-7bb9-bdd9-25196fbf8ce9");
        tokio::task::spawn_blocking(move || command.output())
    };
    let unreadable = ask(Role::Launcher).await.unwrap().unwrap();
    assert!(!unreadable.status.success());
    let said = stderr(&unreadable);
    assert!(said.contains("cannot be read"), "{said}");
    assert!(!said.contains("check the id"), "{said}");
    // Whoever may read the log is told the id is unknown.
    let readable = ask(Role::Operator).await.unwrap().unwrap();
    assert!(!readable.status.success());
    assert!(
        stderr(&readable).contains("check the id"),
        "{}",
        stderr(&readable)
    );
    serving.abort();
}
