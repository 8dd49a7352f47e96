//! `fairshare.api.submit`: check a submission and append it, answering with the job id.

use fairshare_runtime::reply::ReplyTo;
use std::sync::Arc;

use fairshare_events::headers::{self, TraceParent};
use fairshare_events::pb::{self, event::Body, submit_reply};
use fairshare_events::{codec, subjects};
use fairshare_model::shape::Shape;
use fairshare_runtime::envelope::{Envelope, incoming_trace};
use fairshare_runtime::telemetry::{Handling, Relation, Role};
use tracing::Instrument;
use uuid::Uuid;

use super::shared::{
    CATCH_UP, Retry, Shared, behind, depends_on_inventory, malformed, rejection_of, unavailable,
};
use crate::domain::{Checked, check_submission, job_submitted, key_reused, request_fingerprint};

/// Answers one submit request.
pub(super) async fn handle(
    shared: Arc<Shared>,
    client: async_nats::Client,
    msg: async_nats::Message,
) {
    let reply_to = match fairshare_runtime::reply::reply_to(&msg) {
        ReplyTo::Inbox(inbox) => inbox,
        ReplyTo::Missing => {
            tracing::warn!(
                "submit request without a reply subject ignored; use the intake stream to submit without waiting"
            );
            return;
        }
        // Nothing submitted: the answer would go somewhere no client waits.
        ReplyTo::NotAnInbox(_) => {
            let _ = fairshare_runtime::reply::inbox_or_warn(&msg);
            return;
        }
    };
    let mut handling = Handling::start(
        "submit",
        Role::Request,
        incoming_trace(msg.headers.as_ref()),
        Relation::Child,
        &[],
    );
    let result = match codec::decode_submit_request(&msg.payload) {
        Err(e) => Err(malformed(&e.to_string())),
        Ok(request) => submit(&shared, &request, handling.hand_on()).await,
    };
    if let Err(rejection) = &result {
        handling.fail(&rejection.message);
    }
    let reply = pb::SubmitReply {
        result: Some(match result {
            Ok(accepted) => submit_reply::Result::Accepted(accepted),
            Err(rejection) => {
                tracing::info!(
                    code = rejection.code,
                    "submission rejected: {}",
                    rejection.message
                );
                submit_reply::Result::Rejected(rejection)
            }
        }),
    };
    if let Err(e) = client.publish(reply_to, codec::encode(&reply)).await {
        tracing::warn!("could not send submit reply: {e}");
    }
}

async fn submit(
    shared: &Shared,
    request: &pb::SubmitRequest,
    trace: TraceParent,
) -> Result<pb::Accepted, pb::Rejection> {
    let mut caught_up = false;
    let checked = loop {
        // Bound first: the state's lock must not be held across the wait below.
        let checked = check_submission(&shared.state(), request, &shared.limits);
        match checked {
            Err(rejection)
                if !caught_up && depends_on_inventory(&shared.state(), request, &rejection) =>
            {
                // The follower folds the log apart from this request: a budget tree or node
                // the launcher's operator applied a moment ago may not be folded yet. Judge
                // again once it is, rather than refuse what would be accepted in a moment.
                caught_up = true;
                let cluster = request.spec.as_ref().map_or("", |s| s.cluster.as_str());
                shared
                    .catch_up_on_cluster(cluster, CATCH_UP)
                    .await
                    .map_err(|e| behind(&e))?;
            }
            checked => break checked?,
        }
    };
    match checked {
        Checked::Repeat { job_id, sequence } => Ok(pb::Accepted {
            job_id,
            stream_sequence: sequence,
            duplicate: true,
        }),
        Checked::New(shape) => append_submitted(shared, request, shape, trace).await,
    }
}

/// A fresh UUIDv7 whose time part is the service clock's `now_ms`.
fn new_job_id(now_ms: i64) -> Uuid {
    let ms = u64::try_from(now_ms).unwrap_or(0);
    let subsec_nanos = u32::try_from((ms % 1000) * 1_000_000).unwrap_or(0);
    Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        ms / 1000,
        subsec_nanos,
    ))
}

/// Appends the job-submitted event of a checked submission, carrying `trace` (the context of
/// the span that handles the submission). If JetStream reports the key's message id as a
/// duplicate (a concurrent or retried submit won the race), the first event is read back so
/// the answer names the first job, never a second one.
pub(super) async fn append_submitted(
    shared: &Shared,
    request: &pb::SubmitRequest,
    shape: Shape,
    trace: TraceParent,
) -> Result<pb::Accepted, pb::Rejection> {
    let job_id = new_job_id(shared.clock.now_ms()).to_string();
    let cluster = request
        .spec
        .as_ref()
        .map(|s| s.cluster.clone())
        .unwrap_or_default();
    let span = tracing::info_span!("submit", job_id = %job_id, trace = %trace);
    write_submitted(shared, request, shape, trace, job_id, cluster)
        .instrument(span)
        .await
}

async fn write_submitted(
    shared: &Shared,
    request: &pb::SubmitRequest,
    shape: Shape,
    trace: TraceParent,
    job_id: String,
    cluster: String,
) -> Result<pb::Accepted, pb::Rejection> {
    let envelope = Envelope {
        message_id: headers::submission_id(&request.idempotency_key),
        idempotency_key: Some(request.idempotency_key.clone()),
        trace: Some(trace),
        ..Default::default()
    };
    let body = Body::JobSubmitted(job_submitted(&job_id, request, shape));
    let (sequence, duplicate) = shared
        .append(
            subjects::job_event(&cluster, &job_id, "job_submitted"),
            body,
            &envelope,
        )
        .await
        .map_err(|e| rejection_of(e, Retry::SameKey))?;
    let fingerprint = request_fingerprint(request.spec.as_ref());
    if !duplicate {
        shared.state().note_accepted(
            &request.idempotency_key,
            &job_id,
            &cluster,
            sequence,
            fingerprint,
        );
        tracing::debug!(sequence, "job accepted");
        return Ok(pb::Accepted {
            job_id,
            stream_sequence: sequence,
            duplicate: false,
        });
    }
    let first = shared
        .read_event(sequence)
        .await
        .map_err(|e| unavailable(&e))?;
    match first.and_then(|e| e.body) {
        Some(Body::JobSubmitted(s)) => {
            // The cluster of the submission in the log, not this request's: a repeat of the key
            // naming another cluster must not file the job under it (its cancels would then
            // expect the wrong subjects).
            let first_cluster = s.spec.as_ref().map_or(cluster, |spec| spec.cluster.clone());
            let first = request_fingerprint(s.spec.as_ref());
            shared.state().note_accepted(
                &request.idempotency_key,
                &s.job_id,
                &first_cluster,
                sequence,
                first,
            );
            // The stream took the key for a repeat (its message id), but this request asks
            // for something else: that is no retry.
            if first != fingerprint {
                return Err(key_reused(&request.idempotency_key, &s.job_id));
            }
            Ok(pb::Accepted {
                job_id: s.job_id,
                stream_sequence: sequence,
                duplicate: true,
            })
        }
        Some(Body::JobRejected(r)) => Err(r.rejection.unwrap_or_default()),
        // Another publisher wrote a message under the key's id (a launcher may publish its
        // jobs' events with any id): for the stream's de-duplication window nothing can be
        // written under it. Retrying would wait that out, holding up the intake behind it,
        // so the answer is final: a new key.
        _ => Err(pb::Rejection {
            code: pb::RejectionCode::KeyReused as i32,
            message: format!(
                "idempotency key {:?} is taken: the log's entry at sequence {sequence} carries \
                 its message id and is no submission; submit with a new key",
                request.idempotency_key
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::super::shared::tests::{fold_later, fresh_shared, log_cluster_c, one_gpu_request};
    use super::*;

    /// A budget tree and a node applied a moment before a submission to them, not yet folded
    /// when it comes in: it is accepted once they are, not refused as "unknown cluster".
    #[tokio::test]
    async fn a_submission_waits_for_the_clusters_newest_policy_and_nodes() {
        let (_server, js, shared) = fresh_shared().await;
        let logged = log_cluster_c(&js).await;
        let follower = fold_later(&shared, logged);
        let request = one_gpu_request("k-1");
        let accepted = submit(&shared, &request, TraceParent::new_root((1, 1))).await;
        follower.await.unwrap();
        let accepted = accepted.unwrap();
        assert!(!accepted.duplicate);
        // A cluster that the log does not hold either is refused once the fold has caught up.
        let mut elsewhere = one_gpu_request("k-2");
        if let Some(spec) = elsewhere.spec.as_mut() {
            spec.cluster = "nowhere".into();
        }
        let refused = submit(&shared, &elsewhere, TraceParent::new_root((1, 1)))
            .await
            .unwrap_err();
        assert_eq!(refused.code, pb::RejectionCode::UnknownCluster as i32);
    }

    /// A key the log has rejected keeps that answer for good: a retry of it is answered at
    /// once, even while the fold is behind the cluster's newest budget tree and nodes (it
    /// waited for them, and then said "unavailable, retry" instead of the answer).
    #[tokio::test]
    async fn a_key_rejected_before_is_answered_without_waiting_for_the_fold() {
        let (_server, js, shared) = fresh_shared().await;
        // The cluster is in the log but not folded here: the fold is behind.
        log_cluster_c(&js).await;
        let rejected = pb::Event {
            at_ms: 1_700_000_000_000,
            body: Some(Body::JobRejected(pb::JobRejected {
                idempotency_key: "k-r".into(),
                cluster: "c".into(),
                rejection: Some(pb::Rejection {
                    code: pb::RejectionCode::UnknownAllocation as i32,
                    message: "no allocation x".into(),
                }),
                intake_sequence: 1,
            })),
        };
        shared.state().apply(1, &rejected);
        let started = std::time::Instant::now();
        let answer = submit(
            &shared,
            &one_gpu_request("k-r"),
            TraceParent::new_root((1, 1)),
        )
        .await
        .unwrap_err();
        assert_eq!(
            answer.code,
            pb::RejectionCode::UnknownAllocation as i32,
            "{answer:?}"
        );
        assert!(answer.message.contains("rejected before"), "{answer:?}");
        // (Waiting for the fold would take CATCH_UP, 2 s, and end "unavailable".)
        assert!(started.elapsed() < CATCH_UP, "{:?}", started.elapsed());
    }
}
