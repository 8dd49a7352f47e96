//! The JetStream behaviour the services rely on, checked against the real server: streams as
//! defined, de-duplication by message id, and optimistic concurrency over all of a job's kinds.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use async_nats::jetstream::context::PublishErrorKind;
use fairshare_e2e::{CLUSTER, Stack};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::streams::{self, EVENTS_STREAM, INTAKE_STREAM};
use fairshare_events::{codec, subjects};
use fairshare_runtime::envelope::Envelope;

fn event(body: Body) -> bytes::Bytes {
    codec::encode(&pb::Event {
        at_ms: 1,
        body: Some(body),
    })
}

#[tokio::test]
async fn streams_are_created_as_defined() {
    let stack = Stack::start().await.unwrap();
    for (name, spec) in [
        (EVENTS_STREAM, streams::events()),
        (INTAKE_STREAM, streams::intake()),
    ] {
        let mut stream = stack.js.get_stream(name).await.unwrap();
        let config = stream.info().await.unwrap().config.clone();
        assert_eq!(config.subjects, spec.subjects);
        assert_eq!(
            config.storage,
            async_nats::jetstream::stream::StorageType::File
        );
        assert_eq!(config.duplicate_window, spec.duplicate_window);
    }
    // Idempotent: a second set-up changes nothing and does not fail.
    fairshare_runtime::nats::ensure_streams(&stack.js, 1)
        .await
        .unwrap();
}

#[tokio::test]
async fn optimistic_concurrency_covers_every_kind_of_a_job() {
    let stack = Stack::start().await.unwrap();
    let job = "0190b6a4-9f3e-7c3a-8d6e-000000000001";
    let scope = subjects::job(CLUSTER, job);
    let publish = |kind: &'static str, expected: u64, id: &'static str| {
        let js = stack.js.clone();
        let scope = scope.clone();
        async move {
            let envelope = Envelope {
                message_id: id.to_owned(),
                expected_last_subject_sequence: Some((expected, Some(scope))),
                ..Default::default()
            };
            js.publish_with_headers(
                subjects::job_event(CLUSTER, job, kind),
                envelope.to_headers(),
                event(Body::JobStarted(pb::JobStarted { job_id: job.into() })),
            )
            .await
            .unwrap()
            .await
        }
    };
    let first = publish("job_submitted", 0, "a")
        .await
        .expect("nothing there yet: expected 0 holds");
    let second = publish("job_started", first.sequence, "b")
        .await
        .expect("expected sequence holds");
    // A writer that last saw `first` must be refused, although its own kind's subject is new.
    let stale = publish("job_cancelled", first.sequence, "c")
        .await
        .expect_err("stale writer refused");
    assert_eq!(stale.kind(), PublishErrorKind::WrongLastSequence);
    // The newest event over all kinds is what a refused writer reads to catch up.
    let stream = stack.js.get_stream(EVENTS_STREAM).await.unwrap();
    let newest = stream
        .get_last_raw_message_by_subject(&scope)
        .await
        .unwrap();
    assert_eq!(newest.sequence, second.sequence);
}

#[tokio::test]
async fn message_ids_deduplicate() {
    let stack = Stack::start().await.unwrap();
    let envelope = Envelope {
        message_id: "same".into(),
        ..Default::default()
    };
    let body = || event(Body::JobStarted(pb::JobStarted { job_id: "j".into() }));
    let subject = subjects::job_event(CLUSTER, "j", "job_started");
    let a = stack
        .js
        .publish_with_headers(subject.clone(), envelope.to_headers(), body())
        .await
        .unwrap()
        .await
        .unwrap();
    let b = stack
        .js
        .publish_with_headers(subject, envelope.to_headers(), body())
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(!a.duplicate);
    assert!(b.duplicate);
    assert_eq!(a.sequence, b.sequence);
}
