//! The durable intake: submissions launchers published to `fairshare.intake.<cluster>` while
//! they could not (or would not) wait for a reply.
//!
//! A durable consumer with one message in flight keeps intake order across restarts. Each
//! message ends as at most one new job-submitted or job-rejected event, and is acknowledged
//! only after that event is in the log; a crash in between redelivers it, and the repeat is
//! dropped by its message id. An acceptance carries `submit:<key>`, and so does a rejection
//! unless that id cannot be its own: a key that cannot be one, or whose id the log holds for
//! another request's acceptance or another publisher's message (found by the fold, or by the
//! stream calling the write a duplicate and the entry read back); those rejections carry
//! `intake:<intake sequence>`. A message whose key already has its answer (a rejection, or
//! the acceptance of the same request) writes none.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, consumer};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::streams::{INTAKE_CONSUMER, INTAKE_STREAM};
use fairshare_events::{codec, headers, subjects};
use fairshare_runtime::envelope::{Envelope, incoming_trace};
use fairshare_runtime::telemetry::{Handling, Relation, Role};
use futures::StreamExt;

use super::ServiceError;
use super::shared::{CATCH_UP, Shared, depends_on_inventory, malformed};
use super::submit::append_submitted;
use crate::domain::{
    Checked, KeyOutcome, MAX_REJECTION_MESSAGE_BYTES, bounded, check_submission,
    idempotency_key_problem, request_fingerprint,
};
use fairshare_events::headers::TraceParent;

/// How long before a message that could not be handled (log unavailable) is offered again.
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// The durable intake consumer (created on first start, resumed afterwards).
pub(super) async fn consumer(shared: &Shared) -> Result<consumer::PullConsumer, ServiceError> {
    let stream = shared
        .js
        .get_stream(INTAKE_STREAM)
        .await
        .map_err(|e| ServiceError::Intake(e.to_string()))?;
    stream
        .get_or_create_consumer(
            INTAKE_CONSUMER,
            fairshare_runtime::nats::intake_consumer_config(),
        )
        .await
        .map_err(|e| ServiceError::Intake(e.to_string()))
}

/// Handles intake messages in order until the connection closes.
pub(super) async fn run(
    shared: Arc<Shared>,
    consumer: consumer::PullConsumer,
) -> Result<(), String> {
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    while let Some(message) = messages.next().await {
        let message = match message {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("intake delivery: {e}");
                continue;
            }
        };
        let ack = match handle(&shared, &message).await {
            Ok(()) => AckKind::Ack,
            Err(detail) => {
                tracing::warn!("intake message kept for retry: {detail}");
                AckKind::Nak(Some(RETRY_DELAY))
            }
        };
        if let Err(e) = message.ack_with(ack).await {
            tracing::warn!("intake ack failed (the message will be redelivered): {e}");
        }
    }
    Ok(())
}

/// The idempotency key an intake message's headers name, for a message whose bytes do not
/// decode: [`headers::IDEMPOTENCY_KEY`], or else its `Nats-Msg-Id` without `submit:` (the
/// README tells launchers in other languages to set only that), so the launcher waiting for
/// its key finds the rejection.
fn key_of_headers(h: &async_nats::HeaderMap) -> Option<String> {
    if let Some(key) = h.get(headers::IDEMPOTENCY_KEY) {
        return Some(key.as_str().to_owned());
    }
    let id = h.get(headers::MESSAGE_ID)?;
    id.as_str()
        .strip_prefix(&headers::submission_id(""))
        .map(str::to_owned)
}

/// Turns one intake message into its event. `Err` means nothing was written: retry later.
async fn handle(shared: &Shared, message: &async_nats::jetstream::Message) -> Result<(), String> {
    let intake_sequence = message.info().map_err(|e| e.to_string())?.stream_sequence;
    // The intake stream takes any single token after its prefix, so the token is checked as a
    // cluster name before it goes into a rejection or names the cluster to catch up on.
    let cluster = subjects::cluster_of_intake(&message.subject)
        .filter(|token| subjects::is_valid_token(token))
        .unwrap_or(subjects::INVALID_CLUSTER_TOKEN);
    let handling = Handling::start(
        "intake",
        Role::Entry,
        incoming_trace(message.headers.as_ref()),
        Relation::Child,
        &[("fairshare.cluster", cluster)],
    );
    let trace = handling.hand_on();
    let header_key = message.headers.as_ref().and_then(key_of_headers);
    let request = match codec::decode_submit_request(&message.payload) {
        Ok(r) => r,
        Err(e) => {
            let key = header_key.unwrap_or_default();
            if answered(shared, &key) {
                return Ok(());
            }
            let rejection = malformed(&e.to_string());
            return reject(
                shared,
                &key,
                None,
                cluster,
                rejection,
                intake_sequence,
                trace,
            )
            .await;
        }
    };
    let key = request.idempotency_key.clone();
    if answered_alike(shared, &key, &request) {
        return Ok(());
    }
    let answer = |rejection| {
        reject(
            shared,
            &key,
            Some(&request),
            cluster,
            rejection,
            intake_sequence,
            trace,
        )
    };
    if cluster == subjects::INVALID_CLUSTER_TOKEN {
        let rejection = pb::Rejection {
            code: pb::RejectionCode::InvalidName as i32,
            message: bounded(
                format!(
                    "published to intake subject {:?}, which names no cluster: the one token \
                     after \"{}.\" must be a cluster name (letters, digits, '-' and '_', \
                     starting with a letter or digit, at most {} bytes)",
                    message.subject.as_str(),
                    subjects::INTAKE_PREFIX,
                    subjects::MAX_TOKEN_LEN
                ),
                MAX_REJECTION_MESSAGE_BYTES,
            ),
        };
        return answer(rejection).await;
    }
    let stored_ms = message
        .info()
        .map(|i| i64::try_from(i.published.unix_timestamp_nanos() / 1_000_000).unwrap_or(0))
        .map_err(|e| e.to_string())?;
    if shared.state().intake_expired(stored_ms) {
        let waited_h = (shared.state().log_time_ms - stored_ms) / 3_600_000;
        let rejection = pb::Rejection {
            code: pb::RejectionCode::Expired as i32,
            message: format!(
                "waited {waited_h} h in the intake, longer than keys are remembered: key {key:?} \
                 may have been accepted already; check its job, and submit again with a new key \
                 if it has none"
            ),
        };
        return answer(rejection).await;
    }
    // A missing spec or an unusable key is answered as request/reply answers it (by
    // `check_submission`), not hidden behind the cluster it failed to name.
    if idempotency_key_problem(&key, &shared.limits).is_none()
        && let Some(spec) = &request.spec
        && spec.cluster != cluster
    {
        let spec_cluster = &spec.cluster;
        let rejection = pb::Rejection {
            code: pb::RejectionCode::InvalidName as i32,
            message: bounded(
                format!(
                    "published to the intake of cluster {cluster:?} but names cluster \
                     {spec_cluster:?}"
                ),
                MAX_REJECTION_MESSAGE_BYTES,
            ),
        };
        return answer(rejection).await;
    }
    let mut caught_up = false;
    loop {
        let checked = check_submission(&shared.state(), &request, &shared.limits);
        return match checked {
            Ok(Checked::Repeat { .. }) => Ok(()),
            Ok(Checked::New(shape)) => {
                match append_submitted(shared, &request, shape, trace).await {
                    Ok(_) => Ok(()),
                    Err(r) if r.code == pb::RejectionCode::Unavailable as i32 => Err(r.message),
                    // The stream took it for a repeat of another request with the key, which
                    // the fold had not reached yet: that answer is this message's own.
                    Err(r) if r.code == pb::RejectionCode::KeyReused as i32 => answer(r).await,
                    // The key had been rejected before (read back from the log): nothing to add.
                    Err(_) => Ok(()),
                }
            }
            Err(rejection)
                if !caught_up && depends_on_inventory(&shared.state(), &request, &rejection) =>
            {
                // A logged rejection is final for its key, and the intake runs apart from the
                // log's follower: a budget tree or node the launcher saw applied a moment ago
                // may not be folded yet. Judge again once it is.
                caught_up = true;
                shared.catch_up_on_cluster(cluster, CATCH_UP).await?;
                continue;
            }
            Err(rejection) => answer(rejection).await,
        };
    }
}

/// Whether the log already answers `request`: its key's outcome is there, and is no
/// acceptance of another request. A key accepted for another request is checked like a new
/// submission, so its reuse is logged as a `KEY_REUSED` rejection (the launcher reads its
/// answer from the log, and the key's acceptance answers another request); a key rejected
/// before keeps that answer, since the rejection does not say which request it was for.
fn answered_alike(shared: &Shared, key: &str, request: &pb::SubmitRequest) -> bool {
    answered(shared, key)
        && !matches!(
            shared.state().keys.get(key),
            Some(KeyOutcome::Accepted { request: first, .. })
                if *first != request_fingerprint(request.spec.as_ref())
        )
}

/// Whether the log already holds the outcome of key `key`. Only a key that can be one is
/// looked up: an invalid one (say empty) answered once must not answer for every later
/// submission that has it too, each of which gets its own rejection.
fn answered(shared: &Shared, key: &str) -> bool {
    idempotency_key_problem(key, &shared.limits).is_none() && shared.state().keys.contains_key(key)
}

/// Logs `rejection` as intake message `intake_sequence`'s answer for key `key`; `request` is
/// the request it answers, `None` when its bytes were no request.
async fn reject(
    shared: &Shared,
    key: &str,
    request: Option<&pb::SubmitRequest>,
    cluster: &str,
    mut rejection: pb::Rejection,
    intake_sequence: u64,
    trace: TraceParent,
) -> Result<(), String> {
    rejection.message = bounded(rejection.message, MAX_REJECTION_MESSAGE_BYTES);
    tracing::info!(
        key,
        intake_sequence,
        "intake submission rejected: {}",
        rejection.message
    );
    // A key that cannot be one (empty, oversized, a line break) still needs a unique, stable
    // message id; so does a key's reuse, whose own id is its acceptance's, which the stream
    // would take this for a repeat of, and any rejection of a key the log has an outcome for
    // already (accepted for another request: its expiry, or a cluster it does not name).
    let valid_key = idempotency_key_problem(key, &shared.limits).is_none();
    let key_id_taken =
        rejection.code == pb::RejectionCode::KeyReused as i32 || answered(shared, key);
    let message_id = if valid_key && !key_id_taken {
        headers::submission_id(key)
    } else {
        format!("intake:{intake_sequence}")
    };
    let mut envelope = Envelope {
        message_id,
        idempotency_key: valid_key.then(|| key.to_owned()),
        trace: Some(trace),
        ..Default::default()
    };
    // An invalid key is recorded cut to the longest a key may be: the rejection must fit a
    // NATS message whatever was sent.
    let recorded_key = if valid_key {
        key.to_owned()
    } else {
        bounded(key.to_owned(), shared.limits.max_idempotency_key_bytes)
    };
    let body = Body::JobRejected(pb::JobRejected {
        idempotency_key: recorded_key,
        cluster: cluster.to_owned(),
        rejection: Some(rejection),
        intake_sequence,
    });
    let subject = subjects::rejected(cluster);
    // At most three ids: the key's, the message's own, and the message's own with the
    // sequence of whatever holds that one.
    for _ in 0..3 {
        let (sequence, duplicate) = shared
            .append(subject.clone(), body.clone(), &envelope)
            .await
            .map_err(|e| format!("{e:?}"))?;
        if !duplicate {
            return Ok(());
        }
        // The stream holds something under this id that the fold had not reached. Under the
        // key's id: the key's own earlier answer (its rejection, or the acceptance of this
        // very request: nothing to add), or another request's acceptance or another
        // publisher's message (bytes that may not even decode). Under the message's own: this
        // rejection, written before a restart; or, should the intake stream have been made
        // anew (its sequences start again at 1) or a launcher have used that id, something
        // else, which would leave this message with no answer of its own.
        let first = shared.read_event(sequence).await?.and_then(|e| e.body);
        let answered = if envelope.message_id.starts_with("intake:") {
            is_this_rejection(&first, &body)
        } else {
            key_answers(&first, key, request)
        };
        if answered {
            return Ok(());
        }
        envelope.message_id = if envelope.message_id.starts_with("intake:") {
            format!("intake:{intake_sequence}:{sequence}")
        } else {
            format!("intake:{intake_sequence}")
        };
    }
    Err(format!(
        "every message id tried for intake message {intake_sequence}'s rejection holds \
         another entry"
    ))
}

/// Whether `first`, found in the log under an intake message's own id, is `rejection` (that
/// message's rejection, written before): the same key, cluster and intake sequence.
fn is_this_rejection(first: &Option<Body>, rejection: &Body) -> bool {
    match (first, rejection) {
        (Some(Body::JobRejected(found)), Body::JobRejected(ours)) => {
            found.idempotency_key == ours.idempotency_key
                && found.cluster == ours.cluster
                && found.intake_sequence == ours.intake_sequence
        }
        _ => false,
    }
}

/// Whether `first`, found in the log under key `key`'s message id, answers `request`: a
/// rejection of the key (a key keeps its first answer), or its acceptance of this very request
/// or, for bytes that were no request (`None`), of any (as [`answered`] treats a malformed
/// message whose key the fold knows).
fn key_answers(first: &Option<Body>, key: &str, request: Option<&pb::SubmitRequest>) -> bool {
    match first {
        Some(Body::JobRejected(r)) => r.idempotency_key == key,
        Some(Body::JobSubmitted(s)) => {
            s.idempotency_key == key
                && request.is_none_or(|request| {
                    request_fingerprint(s.spec.as_ref())
                        == request_fingerprint(request.spec.as_ref())
                })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;

    /// Queues a one-GPU request with `key` in cluster "c"'s intake and takes it as the
    /// service's intake consumer would.
    async fn queued(
        js: &async_nats::jetstream::Context,
        shared: &Shared,
        key: &str,
    ) -> async_nats::jetstream::Message {
        let request = super::super::shared::tests::one_gpu_request(key);
        queued_on(js, shared, "c", &request).await
    }

    /// Queues `request` on the intake subject of cluster token `token` and takes it as the
    /// service's intake consumer would.
    async fn queued_on(
        js: &async_nats::jetstream::Context,
        shared: &Shared,
        token: &str,
        request: &pb::SubmitRequest,
    ) -> async_nats::jetstream::Message {
        js.publish(subjects::intake(token), codec::encode(request))
            .await
            .unwrap()
            .await
            .unwrap();
        next_message(shared).await
    }

    /// A one-GPU request with `key` that names cluster `cluster`.
    fn naming(key: &str, cluster: &str) -> pb::SubmitRequest {
        let mut request = super::super::shared::tests::one_gpu_request(key);
        request.spec.as_mut().unwrap().cluster = cluster.into();
        request
    }

    /// The newest rejection logged for cluster `cluster` (as the stream holds it, with its
    /// headers) and its body.
    async fn newest_rejection(
        shared: &Shared,
        cluster: &str,
    ) -> (
        async_nats::jetstream::message::StreamMessage,
        pb::JobRejected,
    ) {
        let newest = shared
            .events
            .get_last_raw_message_by_subject(&subjects::rejected(cluster))
            .await
            .expect("a rejection was logged");
        let event = codec::decode_event(&newest.payload).unwrap();
        let Some(Body::JobRejected(rejected)) = event.body else {
            panic!("{event:?}");
        };
        (newest, rejected)
    }

    /// A service whose fold already holds cluster "c" (its budget tree and node), with the
    /// server it talks to (kept alive by the caller) and a JetStream context.
    async fn folded_cluster_c() -> (
        fairshare_testkit::NatsServer,
        async_nats::jetstream::Context,
        Arc<Shared>,
    ) {
        let (server, js, shared) = super::super::shared::tests::fresh_shared().await;
        let logged = super::super::shared::tests::log_cluster_c(&js).await;
        for (sequence, event) in &logged {
            shared.state().apply(*sequence, event);
            shared.set_applied(*sequence);
        }
        (server, js, shared)
    }

    /// The newest event of cluster "c".
    async fn newest_event(shared: &Shared) -> pb::Event {
        let newest = shared
            .events
            .get_last_raw_message_by_subject(&subjects::cluster_events("c"))
            .await
            .unwrap();
        codec::decode_event(&newest.payload).unwrap()
    }

    /// The first intake message of `shared`'s intake consumer.
    async fn next_message(shared: &Shared) -> async_nats::jetstream::Message {
        consumer(shared)
            .await
            .unwrap()
            .fetch()
            .max_messages(1)
            .messages()
            .await
            .unwrap()
            .next()
            .await
            .unwrap()
            .unwrap()
    }

    /// The newest rejection of cluster "c", checked to answer key `key` under intake message
    /// `message`'s own id (not the key's): its sequence and rejection code.
    async fn logged_under_own_id(
        shared: &Shared,
        message: &async_nats::jetstream::Message,
        key: &str,
    ) -> (u64, i32) {
        let (newest, rejected) = newest_rejection(shared, "c").await;
        assert_eq!(rejected.idempotency_key, key);
        let id = newest
            .headers
            .get("Nats-Msg-Id")
            .map(|v| v.to_string())
            .unwrap_or_default();
        let own = format!("intake:{}", message.info().unwrap().stream_sequence);
        assert_eq!(id, own, "written under the key's id, not the message's own");
        (newest.sequence, rejected.rejection.unwrap().code)
    }

    /// The events stream's last sequence.
    async fn last_sequence(shared: &Shared) -> u64 {
        let mut events = shared.events.clone();
        events.info().await.unwrap().state.last_sequence
    }

    /// Handles `message` once the rest of the log has moved on by the key memory (a day)
    /// since the stream stored it.
    async fn handle_a_day_late(shared: &Shared, message: &async_nats::jetstream::Message) {
        let stored_ms =
            i64::try_from(message.info().unwrap().published.unix_timestamp_nanos() / 1_000_000)
                .unwrap();
        shared
            .state()
            .advance_log_time(stored_ms + crate::domain::FORGET_AFTER_MS);
        handle(shared, message).await.unwrap();
    }

    /// An intake message that waited out more than the service's memory of keys is rejected
    /// as expired, not accepted: its key may belong to a job accepted before and forgotten.
    #[tokio::test]
    async fn an_intake_message_older_than_the_key_memory_is_rejected_as_expired() {
        let (_server, js, shared) = folded_cluster_c().await;
        let message = queued(&js, &shared, "k-old").await;
        handle_a_day_late(&shared, &message).await;
        let event = newest_event(&shared).await;
        let Some(Body::JobRejected(rejected)) = event.body else {
            panic!("{event:?}");
        };
        let code = rejected.rejection.unwrap().code;
        assert_eq!(code, pb::RejectionCode::Expired as i32);
    }

    /// Job `job` accepted for two GPUs with key `key`, appended under the key's message id as
    /// the service writes an acceptance (not folded here); its sequence and event.
    async fn accept_two_gpus(shared: &Shared, key: &str, job: &str) -> (u64, pb::Event) {
        let mut first = super::super::shared::tests::one_gpu_request(key);
        first.spec.as_mut().unwrap().gpus = 2;
        let shape = fairshare_model::shape::Shape {
            nodes: 1,
            gpus_per_node: 2,
        };
        let envelope = Envelope {
            message_id: headers::submission_id(key),
            idempotency_key: Some(key.into()),
            ..Default::default()
        };
        let body = Body::JobSubmitted(crate::domain::job_submitted(job, &first, shape));
        let (sequence, _) = shared
            .append(
                subjects::job_event("c", job, "job_submitted"),
                body.clone(),
                &envelope,
            )
            .await
            .unwrap();
        let accepted = pb::Event {
            at_ms: 1_700_000_000_000,
            body: Some(body),
        };
        (sequence, accepted)
    }

    /// Another request accepted with the key a moment ago, not yet folded here: the stream
    /// takes this message's write for a repeat of it, and the intake logs this message's own
    /// answer, `KEY_REUSED`, rather than nothing.
    #[tokio::test]
    async fn a_key_the_stream_holds_for_another_request_is_rejected_as_reused() {
        let (_server, js, shared) = folded_cluster_c().await;
        accept_two_gpus(&shared, "k-race", "j-first").await;
        // The same key asking for one GPU.
        let message = queued(&js, &shared, "k-race").await;
        handle(&shared, &message).await.unwrap();
        let event = newest_event(&shared).await;
        let Some(Body::JobRejected(rejected)) = event.body else {
            panic!("{event:?}");
        };
        let rejection = rejected.rejection.unwrap();
        assert_eq!(rejection.code, pb::RejectionCode::KeyReused as i32);
        assert!(rejection.message.contains("j-first"), "{rejection:?}");
    }

    /// Writes `payload` on another job's subject under key `key`'s message id
    /// (`submit:<key>`), as a publisher other than the submission service may.
    async fn squat(js: &async_nats::jetstream::Context, key: &str, payload: Vec<u8>) {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", headers::submission_id(key).as_str());
        js.publish_with_headers(
            subjects::job_event("c", "j-other", "job_started"),
            headers,
            payload.into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }

    /// A message some other publisher wrote under a key's message id (`submit:<key>`) makes
    /// the stream drop the key's submission as a repeat for as long as it de-duplicates. The
    /// intake message is answered for good, `KEY_REUSED` under its own id, and taken off the
    /// intake, rather than retried every second ahead of every other cluster's submissions:
    /// also when the squatting bytes are no event at all.
    #[tokio::test]
    async fn a_key_whose_message_id_another_publisher_took_is_rejected_for_good() {
        let (_server, js, shared) = folded_cluster_c().await;
        let started = pb::Event {
            at_ms: 1_700_000_000_000,
            body: Some(Body::JobStarted(pb::JobStarted {
                job_id: "j-other".into(),
            })),
        };
        for (key, payload) in [
            ("k-taken", codec::encode(&started).to_vec()),
            ("k-garbage", vec![0xff; 7]),
        ] {
            squat(&js, key, payload).await;
            let message = queued(&js, &shared, key).await;
            handle(&shared, &message)
                .await
                .expect("answered, not kept for a retry");
            // Taken off the intake, as the service does, so the next one comes next.
            message.ack().await.unwrap();
            let (_, rejected) = newest_rejection(&shared, "c").await;
            assert_eq!(rejected.idempotency_key, key);
            let rejection = rejected.rejection.unwrap();
            assert_eq!(rejection.code, pb::RejectionCode::KeyReused as i32);
            assert!(rejection.message.contains("new key"), "{rejection:?}");
        }
    }

    /// Bytes that are no request, published as the README tells launchers in other languages
    /// to (only `Nats-Msg-Id: submit:<key>`, no key header): the rejection names the key, so
    /// the launcher waiting for its key's answer finds it.
    #[tokio::test]
    async fn a_malformed_intake_message_is_rejected_under_the_key_its_message_id_names() {
        let (_server, js, shared) = folded_cluster_c().await;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(headers::MESSAGE_ID, "submit:k-mangled");
        js.publish_with_headers(subjects::intake("c"), headers, vec![0xff; 9].into())
            .await
            .unwrap()
            .await
            .unwrap();
        let message = next_message(&shared).await;
        handle(&shared, &message)
            .await
            .expect("answered, not kept for a retry");
        let (_, rejected) = newest_rejection(&shared, "c").await;
        assert_eq!(rejected.idempotency_key, "k-mangled");
        assert_eq!(
            rejected.rejection.unwrap().code,
            pb::RejectionCode::Malformed as i32
        );
        // Another id names no key.
        let mut other = async_nats::HeaderMap::new();
        other.insert(headers::MESSAGE_ID, "mine:7");
        assert_eq!(key_of_headers(&other), None);
        other.insert(headers::IDEMPOTENCY_KEY, "k-header");
        assert_eq!(key_of_headers(&other).as_deref(), Some("k-header"));
    }

    /// A rejection written under the intake message's own id (`intake:<sequence>`), which
    /// something else holds (the intake stream made anew, its sequences starting again, or a
    /// launcher that used the id): read back, it is not this rejection, so it is written under
    /// a further id, and the message gets its answer.
    #[tokio::test]
    async fn a_rejection_whose_own_intake_id_is_taken_is_written_under_another() {
        let (_server, js, shared) = folded_cluster_c().await;
        let mut intake = js.get_stream("FAIRSHARE_INTAKE").await.unwrap();
        let next = intake.info().await.unwrap().state.last_sequence + 1;
        let mut held = async_nats::HeaderMap::new();
        held.insert("Nats-Msg-Id", format!("intake:{next}").as_str());
        let squatter = js
            .publish_with_headers(
                subjects::job_event("c", "j-other", "job_started"),
                held,
                vec![0xff; 3].into(),
            )
            .await
            .unwrap()
            .await
            .unwrap()
            .sequence;
        // An empty key is no key: its rejection goes under the message's own id.
        let message = queued_on(&js, &shared, "c", &naming("", "c")).await;
        assert_eq!(message.info().unwrap().stream_sequence, next);
        handle(&shared, &message)
            .await
            .expect("answered, not kept for a retry");
        let (newest, rejected) = newest_rejection(&shared, "c").await;
        assert_eq!(rejected.intake_sequence, next);
        assert_eq!(
            rejected.rejection.unwrap().code,
            pb::RejectionCode::BadIdempotencyKey as i32
        );
        let id = newest.headers.get("Nats-Msg-Id").unwrap().to_string();
        assert_eq!(id, format!("intake:{next}:{squatter}"));
        // Handled again (redelivered after a restart), it finds its own rejection: nothing new.
        let before = last_sequence(&shared).await;
        handle(&shared, &message).await.unwrap();
        assert_eq!(last_sequence(&shared).await, before);
    }

    /// A rejection of an intake message is written under its key's id first; when bytes that
    /// are no event hold that id, it is written under the message's own, not retried every
    /// second for the stream's duplicate window.
    #[tokio::test]
    async fn a_rejection_whose_key_id_holds_undecodable_bytes_is_logged_under_its_own_id() {
        let (_server, js, shared) = folded_cluster_c().await;
        squat(&js, "k-junk", vec![0xff; 7]).await;
        let message = queued_on(&js, &shared, "c", &naming("k-junk", "d")).await;
        handle(&shared, &message)
            .await
            .expect("answered, not kept for a retry");
        let (_, code) = logged_under_own_id(&shared, &message, "k-junk").await;
        assert_eq!(code, pb::RejectionCode::InvalidName as i32);
    }

    /// The key's rejection, or its acceptance, already in the stream but not folded here: a
    /// later intake message with the key that this service would reject adds nothing (the
    /// stream takes its rejection for a repeat, and the entry read back is the key's answer):
    /// an earlier rejection of the key, or any acceptance of it for bytes that were no
    /// request, as a folded answer would have it.
    #[tokio::test]
    async fn a_key_answered_in_the_stream_but_not_folded_gets_no_second_answer() {
        let (_server, js, shared) = folded_cluster_c().await;
        // A rejection of key k-no, written as the intake writes one.
        let envelope = Envelope {
            message_id: headers::submission_id("k-no"),
            idempotency_key: Some("k-no".into()),
            ..Default::default()
        };
        let body = Body::JobRejected(pb::JobRejected {
            idempotency_key: "k-no".into(),
            cluster: "c".into(),
            rejection: Some(malformed("first answer")),
            intake_sequence: 0,
        });
        shared
            .append(subjects::rejected("c"), body, &envelope)
            .await
            .unwrap();
        let answered_at = accept_two_gpus(&shared, "k-yes", "j-yes").await.0;
        let message = queued_on(&js, &shared, "c", &naming("k-no", "d")).await;
        handle(&shared, &message).await.unwrap();
        message.ack().await.unwrap();
        // Bytes that are no request, with a header naming the accepted key.
        let mut with_key = async_nats::HeaderMap::new();
        with_key.insert(headers::IDEMPOTENCY_KEY, "k-yes");
        js.publish_with_headers(subjects::intake("c"), with_key, vec![0xff; 3].into())
            .await
            .unwrap()
            .await
            .unwrap();
        let message = next_message(&shared).await;
        handle(&shared, &message).await.unwrap();
        assert_eq!(
            last_sequence(&shared).await,
            answered_at,
            "a second answer was logged"
        );
    }

    /// A key accepted for one request, then published to the intake with another request that
    /// names another cluster: the rejection is written under the intake message's own id, not
    /// the key's, which the stream would drop as a repeat of the acceptance (leaving the
    /// message no answer in the log).
    #[tokio::test]
    async fn a_rejection_of_a_key_accepted_for_another_request_is_logged() {
        let (_server, js, shared) = folded_cluster_c().await;
        let (sequence, accepted) = accept_two_gpus(&shared, "k-twice", "j-first").await;
        shared.state().apply(sequence, &accepted);
        shared.set_applied(sequence);
        // The same key, one GPU, in cluster c's intake but naming cluster d.
        let message = queued_on(&js, &shared, "c", &naming("k-twice", "d")).await;
        handle(&shared, &message).await.unwrap();
        let event = newest_event(&shared).await;
        let Some(Body::JobRejected(rejected)) = event.body else {
            panic!("the rejection was not logged: {event:?}");
        };
        assert_eq!(
            rejected.rejection.unwrap().code,
            pb::RejectionCode::InvalidName as i32
        );
    }

    /// As above, but the acceptance is not folded yet when the intake message comes: the
    /// rejection, first tried under the key's message id, is taken by the stream for a repeat
    /// of the acceptance, and is logged again under the intake message's own id.
    #[tokio::test]
    async fn a_rejection_the_stream_took_for_an_unfolded_acceptance_is_logged_under_its_own_id() {
        let (_server, js, shared) = folded_cluster_c().await;
        let (accepted_at, _) = accept_two_gpus(&shared, "k-race2", "j-first").await;
        let message = queued_on(&js, &shared, "c", &naming("k-race2", "d")).await;
        handle(&shared, &message).await.unwrap();
        let (sequence, code) = logged_under_own_id(&shared, &message, "k-race2").await;
        assert!(sequence > accepted_at);
        assert_eq!(code, pb::RejectionCode::InvalidName as i32);
    }

    /// An intake message that waited out the key memory while its own request was accepted
    /// (by request/reply, not folded here yet): the acceptance is its answer, and no expiry
    /// is logged beside it.
    #[tokio::test]
    async fn an_expired_message_whose_request_was_accepted_meanwhile_adds_no_rejection() {
        let (_server, js, shared) = folded_cluster_c().await;
        let mut request = super::super::shared::tests::one_gpu_request("k-same");
        request.spec.as_mut().unwrap().gpus = 2;
        let message = queued_on(&js, &shared, "c", &request).await;
        let (accepted_at, _) = accept_two_gpus(&shared, "k-same", "j-same").await;
        handle_a_day_late(&shared, &message).await;
        assert_eq!(
            last_sequence(&shared).await,
            accepted_at,
            "something was logged after the acceptance"
        );
    }

    /// An intake subject whose cluster token cannot be a cluster name is rejected as such,
    /// and the rejection names the stand-in cluster `_`, not the token.
    #[tokio::test]
    async fn an_intake_subject_that_names_no_valid_cluster_is_rejected() {
        let (_server, js, shared) = folded_cluster_c().await;
        let message = queued_on(&js, &shared, "-c", &naming("k-token", "-c")).await;
        handle(&shared, &message).await.unwrap();
        let (_, rejected) = newest_rejection(&shared, subjects::INVALID_CLUSTER_TOKEN).await;
        assert_eq!(rejected.cluster, subjects::INVALID_CLUSTER_TOKEN);
        let rejection = rejected.rejection.unwrap();
        assert_eq!(rejection.code, pb::RejectionCode::InvalidName as i32);
        assert!(
            rejection.message.contains("names no cluster"),
            "{rejection:?}"
        );
    }

    /// A budget tree and a node the launcher saw applied, not yet folded by the service when
    /// its intake message comes in: the message waits for the fold instead of being rejected
    /// for good as "unknown cluster".
    #[tokio::test]
    async fn an_intake_submission_waits_for_the_clusters_newest_policy_and_nodes() {
        let (_server, js, shared) = super::super::shared::tests::fresh_shared().await;
        let logged = super::super::shared::tests::log_cluster_c(&js).await;
        let message = queued(&js, &shared, "k-1").await;

        let follower = super::super::shared::tests::fold_later(&shared, logged);
        handle(&shared, &message).await.unwrap();
        follower.await.unwrap();
        let event = newest_event(&shared).await;
        assert!(
            matches!(event.body, Some(Body::JobSubmitted(_))),
            "{event:?}"
        );
    }
}
