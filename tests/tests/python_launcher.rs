//! A launcher in another language: `tools/launcher-py/fairshare_submit.py` (standard-library
//! Python, its own NATS and protobuf code) against a real nats-server and the submission service.
//! Its request decodes into the job it describes, a repeat of its key gets the same job back, and
//! a rejection comes back with the code's name from the .proto.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Output;

use fairshare_e2e::Stack;
use fairshare_events::pb::event::Body;
use fairshare_submission::Config;

/// Runs the Python launcher against `stack` with `args`.
async fn python_submit(stack: &Stack, args: &[&str]) -> Output {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    fairshare_e2e::python_submit(&stack.server.url(), &args).await
}

/// A 1-GPU submission under `key` that waits 1 s for an answer.
async fn submit_briefly(stack: &Stack, key: &str) -> Output {
    python_submit(
        stack,
        &[
            "--allocation",
            "research/nlp",
            "--min-runtime",
            "60",
            "--key",
            key,
            "--timeout",
            "1",
        ],
    )
    .await
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn a_python_launcher_submits_repeats_and_is_refused_like_any_other() {
    let mut stack = Stack::start().await.unwrap();
    stack.start_submission(Config::default()).await.unwrap();
    let job = [
        "--allocation",
        "research/nlp",
        "--user",
        "ada",
        "--gpus",
        "3",
        "--min-runtime",
        "900",
        "--resumable",
        "--priority",
        "-2",
        "--payload",
        "python train.py --lr 3e-4",
        "--name",
        "train",
        "--key",
        "py-1",
    ];
    let first = python_submit(&stack, &job).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let out = stdout(&first);
    let job_id = out
        .strip_prefix("accepted job ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();

    // What the service wrote is exactly what the script asked for.
    let submitted: Vec<_> = stack
        .all_events()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(_, _, e)| match e.body {
            Some(Body::JobSubmitted(s)) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(submitted.len(), 1);
    let s = &submitted[0];
    assert_eq!(
        (s.job_id.as_str(), s.idempotency_key.as_str()),
        (job_id.as_str(), "py-1")
    );
    let spec = s.spec.as_ref().unwrap();
    assert_eq!(
        (
            spec.allocation.as_str(),
            spec.user.as_str(),
            spec.gpus,
            spec.min_runtime_s,
            spec.resumable,
            spec.priority,
            spec.name.as_str(),
        ),
        ("research/nlp", "ada", 3, 900, true, -2, "train")
    );
    assert_eq!(&spec.payload[..], b"python train.py --lr 3e-4");

    // The same key again: the same job, nothing new written.
    let again = python_submit(&stack, &job).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(
        stdout(&again).starts_with(&format!("accepted job {job_id} ")),
        "{}",
        stdout(&again)
    );
    assert!(stdout(&again).contains("already accepted earlier"));
    let count = stack.event_count().await.unwrap();

    // Refused, by name, for zero and negative GPU counts (a ten-byte varint) and an unknown
    // allocation; nothing written.
    for (gpus, allocation, code) in [
        ("0", "research/nlp", "REJECTION_CODE_INVALID_GPUS"),
        ("-3", "research/nlp", "REJECTION_CODE_INVALID_GPUS"),
        ("1", "research/nobody", "REJECTION_CODE_UNKNOWN_ALLOCATION"),
    ] {
        let key = format!("py-bad-{gpus}-{allocation}");
        let args = [
            "--allocation",
            allocation,
            "--gpus",
            gpus,
            "--min-runtime",
            "60",
            "--key",
            &key,
        ];
        let refused = python_submit(&stack, &args).await;
        assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
        assert!(
            stderr(&refused).starts_with(&format!("rejected ({code}): ")),
            "{}",
            stderr(&refused)
        );
    }
    assert_eq!(stack.event_count().await.unwrap(), count);

    // With the service stopped, the server has nobody to hand the request to: nothing was
    // submitted, exit status 1, no key to retry with.
    stack.stop_submission().await.unwrap();
    let down = submit_briefly(&stack, "py-down").await;
    assert_eq!(down.status.code(), Some(1), "{}", stderr(&down));
    assert!(
        stderr(&down).contains("nothing was submitted"),
        "{}",
        stderr(&down)
    );
    // A subscriber that never answers: the outcome is not known, exit status 3 and the key.
    let silent = stack
        .client
        .subscribe(fairshare_events::subjects::SUBMIT_API)
        .await
        .unwrap();
    stack.client.flush().await.unwrap();
    let unanswered = submit_briefly(&stack, "py-silent").await;
    drop(silent);
    assert_eq!(unanswered.status.code(), Some(3), "{}", stderr(&unanswered));
    assert!(
        stderr(&unanswered).contains("retry with --key py-silent"),
        "{}",
        stderr(&unanswered)
    );
}
