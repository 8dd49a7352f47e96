//! `fairshare submit` against a real nats-server and submission service: the submission
//! carries the caller's W3C trace context (`--traceparent` or the `TRACEPARENT` variable) on
//! both paths, request and intake, so the job's events are in that trace; without one the
//! submission service starts the trace. The CLI prints the id of the trace the job's events
//! carry. A malformed `--traceparent` is refused before anything is sent; a malformed
//! variable is ignored with a warning.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Output;
use std::time::Duration;

use fairshare_e2e::{CLUSTER, Stack};
use fairshare_events::pb::event::Body;

const TRACE_ID: u128 = 0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c;
const CALLER_SPAN: u64 = 0xb7ad_6b71_6920_3331;
const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// Runs the CLI binary's `submit` for a 1-GPU job with key `key`, `extra` arguments and the
/// `TRACEPARENT` variable set to `env` (unset if `None`).
async fn submit(stack: &Stack, key: &str, extra: &[&str], env: Option<&str>) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command
        .args([
            "submit",
            "--nats-url",
            &stack.server.url(),
            "--cluster",
            CLUSTER,
        ])
        .args([
            "--allocation",
            "research/nlp",
            "--min-runtime",
            "15m",
            "--key",
            key,
        ])
        .args(extra);
    match env {
        Some(value) => command.env("TRACEPARENT", value),
        None => command.env_remove("TRACEPARENT"),
    };
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap()
}

/// The 32 hex digits after "trace " in the CLI's output.
fn printed_trace(output: &Output) -> u128 {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let hex = stdout
        .lines()
        .find_map(|l| l.strip_prefix("trace "))
        .unwrap_or_else(|| panic!("no trace line in {stdout:?}"));
    u128::from_str_radix(hex.trim(), 16).unwrap()
}

/// The job id in "accepted job <id> at sequence ...".
fn accepted_job(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("accepted job "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("not accepted: {stdout:?} {:?}", output.stderr))
        .to_owned()
}

/// The job id of the `JobSubmitted` with idempotency key `key`, once it is in the log.
async fn submitted_with_key(stack: &Stack, key: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        for (_, _, event) in stack.all_events().await.unwrap() {
            if let Some(Body::JobSubmitted(s)) = event.body
                && s.idempotency_key == key
            {
                return s.job_id;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key} never accepted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_cli_submission_carries_the_callers_trace_or_starts_one() {
    let mut stack = Stack::start().await.unwrap();
    stack.start_submission(Default::default()).await.unwrap();

    // Request/reply under the caller's trace, handed on unchanged: the submission service's
    // span (and so the event) is in it, as the caller's child.
    let out = submit(&stack, "traced", &["--traceparent", CALLER], None).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(printed_trace(&out), TRACE_ID);
    let traced_job = accepted_job(&out);
    let submitted = stack
        .traceparent_of(&traced_job, "job_submitted")
        .await
        .unwrap();
    assert_eq!(submitted.trace_id, TRACE_ID);
    assert_ne!(submitted.parent_id, CALLER_SPAN, "the service's own span");

    // A repeat of the key is the same job, in the first submission's trace.
    let out = submit(&stack, "traced", &[], None).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(accepted_job(&out), traced_job);
    assert_eq!(printed_trace(&out), TRACE_ID);

    // Without a context the submission service starts the trace; the CLI prints its id.
    let out = submit(&stack, "untraced", &[], None).await;
    assert!(out.status.success(), "{out:?}");
    let job = accepted_job(&out);
    let submitted = stack.traceparent_of(&job, "job_submitted").await.unwrap();
    assert_eq!(printed_trace(&out), submitted.trace_id);
    assert_ne!(submitted.trace_id, TRACE_ID);

    // The variable a workflow tool sets is used; a malformed one is ignored with a warning.
    let out = submit(&stack, "from-env", &[], Some(CALLER)).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(printed_trace(&out), TRACE_ID);
    let out = submit(&stack, "bad-env", &[], Some("garbage")).await;
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("ignoring the TRACEPARENT variable"));
    assert_ne!(printed_trace(&out), TRACE_ID);

    // The durable intake carries it too.
    let out = submit(
        &stack,
        "by-intake",
        &["--intake", "--traceparent", CALLER],
        None,
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(printed_trace(&out), TRACE_ID);
    let job = submitted_with_key(&stack, "by-intake").await;
    let submitted = stack.traceparent_of(&job, "job_submitted").await.unwrap();
    assert_eq!(submitted.trace_id, TRACE_ID);

    // A malformed --traceparent is refused with a reason, and nothing is submitted.
    let before = stack.event_count().await.unwrap();
    let out = submit(&stack, "bad-trace", &["--traceparent", "00-zz-01"], None).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--traceparent") && stderr.contains("invalid traceparent"),
        "{stderr}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(stack.event_count().await.unwrap(), before);
}

/// With no submission service listening, the request reached nobody: the error says nothing
/// was submitted and points at the durable intake, with no key to retry with (exit 1; a
/// service that does not answer in time is exit 3 with the key, `submit_exit.rs`).
#[test]
fn a_submission_nobody_listens_for_is_refused_as_not_submitted() {
    let server = fairshare_testkit::NatsServer::start().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["submit", "--nats-url", &server.url(), "--cluster", CLUSTER])
        .args(["--allocation", "research/nlp", "--min-runtime", "15m"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing was submitted"), "{stderr}");
    assert!(!stderr.contains("retry with --key"), "{stderr}");
    assert!(stderr.contains("--intake"), "{stderr}");
}
