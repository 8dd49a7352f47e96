//! `fairshare submit`'s exit status against a real nats-server: 0 accepted, 1 rejected (or no
//! service listening: nothing submitted), 3 when the outcome is not known, with the key to
//! retry with printed (a retry with a new key could make a second job).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Output;

use fairshare_e2e::{CLUSTER, Stack};

/// Runs the CLI binary's `submit` against `url` for a 15-minute 1-GPU job of `allocation`,
/// with `extra` arguments.
async fn run_submit(url: &str, allocation: &str, extra: Vec<std::ffi::OsString>) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command.args([
        "submit",
        "--nats-url",
        url,
        "--cluster",
        CLUSTER,
        "--allocation",
        allocation,
        "--min-runtime",
        "15m",
    ]);
    command.args(extra);
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap()
}

/// [`run_submit`] on `stack`'s server, with `--key` if given.
async fn submit(stack: &Stack, allocation: &str, key: Option<&str>) -> Output {
    let extra = key
        .map(|k| vec!["--key".into(), k.into()])
        .unwrap_or_default();
    run_submit(&stack.server.url(), allocation, extra).await
}

/// Nobody listening: the request reached no service, so nothing was submitted (exit 1).
/// Somebody listening who never answers: it may have landed, so exit 3 and the key, which a
/// retry then uses to get the one job.
#[tokio::test]
async fn with_no_answer_submit_exits_3_and_names_the_generated_key_to_retry_with() {
    use fairshare_events::subjects;
    let mut stack = Stack::start().await.unwrap();
    let nobody = submit(&stack, "research/nlp", None).await;
    let stderr = String::from_utf8_lossy(&nobody.stderr);
    assert_eq!(nobody.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nothing was submitted"), "{stderr}");
    assert!(!stderr.contains("retry with --key"), "{stderr}");

    // A subscriber that swallows the request: the CLI waits out its 10 s.
    let silent = stack.client.subscribe(subjects::SUBMIT_API).await.unwrap();
    stack.client.flush().await.unwrap();
    let out = submit(&stack, "research/nlp", None).await;
    drop(silent);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let key = stderr
        .split("retry with --key ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
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

/// A service that answers `UNAVAILABLE` (the log did not confirm the write), then bytes that
/// are no reply: the submission may have landed either time, so both are exit 3 with the key.
#[tokio::test]
async fn an_unconfirmed_or_garbled_answer_is_exit_3_not_a_rejection() {
    use fairshare_events::pb::{self, RejectionCode};
    use fairshare_events::{codec, subjects};
    use futures::StreamExt;
    let stack = Stack::start().await.unwrap();
    let mut requests = stack.client.subscribe(subjects::SUBMIT_API).await.unwrap();
    let client = stack.client.clone();
    let responder = tokio::spawn(async move {
        let answers = [
            codec::encode(&pb::SubmitReply {
                result: Some(pb::submit_reply::Result::Rejected(pb::Rejection {
                    code: RejectionCode::Unavailable as i32,
                    message: "the write was not confirmed; it may have landed".into(),
                })),
            }),
            bytes::Bytes::from_static(b"\xff\xff\xff"),
        ];
        for answer in answers {
            let Some(message) = requests.next().await else {
                return;
            };
            client
                .publish(message.reply.unwrap(), answer)
                .await
                .unwrap();
        }
    });
    for expected in ["REJECTION_CODE_UNAVAILABLE", "does not decode"] {
        let out = submit(&stack, "research/nlp", Some("maybe-landed")).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(stderr.contains("retry with --key maybe-landed"), "{stderr}");
    }
    responder.await.unwrap();
}

/// `fairshare submit --intake` of a 15-minute job of `allocation` under key `k-intake`, as the
/// identity whose seed is `nkey` (none: no authentication).
async fn intake(url: &str, allocation: &str, nkey: Option<&std::path::Path>) -> Output {
    let mut extra: Vec<std::ffi::OsString> =
        vec!["--intake".into(), "--key".into(), "k-intake".into()];
    if let Some(seed) = nkey {
        extra.extend(["--nats-nkey".into(), seed.into()]);
    }
    run_submit(url, allocation, extra).await
}

/// Submits under `k-intake` and expects exit 0 with `said` on standard output.
async fn intake_exits_0_saying(
    url: &str,
    allocation: &str,
    nkey: Option<&std::path::Path>,
    said: &str,
) {
    let out = intake(url, allocation, nkey).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout.contains(said), "{stdout}");
}

/// Submits under `k-intake` three times: a first request, the same again, and another one.
/// The repeat of the same request exits 0 (queued already), the other request exits 1.
async fn first_repeat_and_another(url: &str, nkey: Option<&std::path::Path>) {
    let queued = "queued in intake at sequence 1";
    intake_exits_0_saying(url, "research/nlp", nkey, queued).await;
    let again = "queued in intake already at sequence 1";
    intake_exits_0_saying(url, "research/nlp", nkey, again).await;

    let other = intake(url, "research/vision", nkey).await;
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("was used for another request") && stderr.contains("new key"),
        "{stderr}"
    );
}

/// An intake publish the stream drops as a repeat of the key's first message: a retry of that
/// same request is fine (exit 0), another request under the key was dropped and will never be
/// a job, so that fails (exit 1) instead of reading as queued.
#[tokio::test]
async fn an_intake_submission_dropped_as_another_requests_repeat_exits_1() {
    let stack = Stack::start().await.unwrap();
    first_repeat_and_another(&stack.server.url(), None).await;
}

/// The same under the launcher's own identity (`fairshare auth init`), which may read single
/// intake messages and nothing more of that stream.
#[tokio::test]
async fn under_the_launchers_identity_an_intake_repeat_is_told_apart_too() {
    use fairshare_runtime::auth::{self, Role};
    let dir = tempfile::tempdir().unwrap();
    let block = auth::init(dir.path()).unwrap();
    // And a user free to do anything, to make the streams.
    let (before, operator) = block.split_once("    # operator\n").unwrap();
    let config =
        format!("{before}    {{ user: setup, password: setup }}\n    # operator\n{operator}");
    let server = fairshare_testkit::NatsServer::start_with_config(&config).unwrap();
    let setup = async_nats::ConnectOptions::with_user_and_password("setup".into(), "setup".into())
        .connect(server.url())
        .await
        .unwrap();
    fairshare_runtime::nats::ensure_streams(&async_nats::jetstream::new(setup), 1)
        .await
        .unwrap();
    let seed = auth::seed_path(dir.path(), Role::Launcher);
    first_repeat_and_another(&server.url(), Some(&seed)).await;
}

/// What cannot have landed is exit 1, not 3 with a key to retry with (a retry would fail the
/// same way, and a script retrying on 3 would never stop): a request larger than the server's
/// `max_payload`, which the client refuses before sending, by request and by the intake; and an
/// intake publish that no stream takes.
#[tokio::test]
async fn what_cannot_have_landed_exits_1_not_3() {
    let server = fairshare_testkit::NatsServer::start_with_config("max_payload: 65536\n").unwrap();
    let big = "x".repeat(70_000);
    for intake in [false, true] {
        let mut extra: Vec<std::ffi::OsString> = vec![
            "--key".into(),
            "too-big".into(),
            "--payload".into(),
            big.clone().into(),
        ];
        if intake {
            extra.push("--intake".into());
        }
        let out = run_submit(&server.url(), "research/nlp", extra).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "intake {intake}: {stderr}");
        assert!(
            stderr
                .contains("nothing was sent: the request is larger than the server's max_payload"),
            "intake {intake}: {stderr}"
        );
        assert!(!stderr.contains("retry with --key"), "{stderr}");
    }
    let extra = vec!["--key".into(), "no-stream".into(), "--intake".into()];
    let out = run_submit(&server.url(), "research/nlp", extra).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("so nothing was queued"), "{stderr}");
    assert!(!stderr.contains("retry with --key"), "{stderr}");
}
