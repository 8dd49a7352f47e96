//! `fairshare.api.cancel`: end a job that has not ended, on the job's own subject.

use fairshare_runtime::reply::ReplyTo;
use std::sync::Arc;
use std::time::Duration;

use fairshare_events::pb::{self, RejectionCode, cancel_reply, event::Body};
use fairshare_events::{codec, headers, subjects};
use fairshare_runtime::envelope::{Envelope, incoming_trace};
use fairshare_runtime::log::newest_sequence;
use fairshare_runtime::telemetry::{Handling, Relation, Role};

use super::shared::{AppendError, Retry, Shared, malformed, rejection_of, unavailable};
use crate::domain::{CancelTarget, check_cancel};

/// Attempts before a cancel that keeps losing optimistic-concurrency races gives up.
const ATTEMPTS: usize = 3;
/// How long to wait for the fold to reach a job's newest event after a conflict.
const CATCH_UP: Duration = Duration::from_secs(2);

/// Answers one cancel request.
pub(super) async fn handle(
    shared: Arc<Shared>,
    client: async_nats::Client,
    msg: async_nats::Message,
) {
    let reply_to = match fairshare_runtime::reply::reply_to(&msg) {
        ReplyTo::Inbox(inbox) => inbox,
        ReplyTo::Missing => {
            tracing::warn!("cancel request without a reply subject ignored");
            return;
        }
        // Nothing cancelled: the answer would go somewhere no client waits.
        ReplyTo::NotAnInbox(_) => {
            let _ = fairshare_runtime::reply::inbox_or_warn(&msg);
            return;
        }
    };
    let mut handling = Handling::start(
        "cancel",
        Role::Request,
        incoming_trace(msg.headers.as_ref()),
        Relation::Child,
        &[],
    );
    let result = match codec::decode_cancel_request(&msg.payload) {
        Err(e) => Err(malformed(&e.to_string())),
        Ok(request) => cancel(&shared, &request, Some(handling.hand_on())).await,
    };
    if let Err(rejection) = &result {
        handling.fail(&rejection.message);
    }
    let reply = pb::CancelReply {
        result: Some(match result {
            Ok(c) => cancel_reply::Result::Cancelled(c),
            Err(r) => cancel_reply::Result::Rejected(r),
        }),
    };
    if let Err(e) = client.publish(reply_to, codec::encode(&reply)).await {
        tracing::warn!("could not send cancel reply: {e}");
    }
}

async fn cancel(
    shared: &Shared,
    request: &pb::CancelRequest,
    trace: Option<headers::TraceParent>,
) -> Result<pb::Cancelled, pb::Rejection> {
    // The state's lock is let go at the end of the statement, before anything awaits.
    let unknown = matches!(
        check_cancel(&shared.state(), request, &shared.limits),
        Err(r) if r.code == RejectionCode::UnknownJob as i32
    );
    if unknown && subjects::is_valid_token(&request.job_id) {
        // Another instance may have accepted the job a moment ago, ahead of this one's fold:
        // "unknown" is final for a launcher, so it is said only once the fold holds
        // everything the log has of the job (the check below says it then).
        let newest = newest_sequence(
            &shared.events,
            &subjects::job_in_any_cluster(&request.job_id),
        )
        .await
        .map_err(|e| unavailable(&e))?;
        if !shared.wait_applied(newest, CATCH_UP).await {
            return Err(unavailable("the fold is behind the log"));
        }
    }
    // Set once the stream took the cancel for a repeat of an entry that is no cancellation of
    // this job: another publisher wrote a message under the cancel's id.
    let mut id_taken = false;
    for _ in 0..ATTEMPTS {
        let target = check_cancel(&shared.state(), request, &shared.limits)?;
        let (cluster, expected) = match target {
            CancelTarget::AlreadyCancelled { sequence } => {
                return Ok(pb::Cancelled {
                    job_id: request.job_id.clone(),
                    stream_sequence: sequence,
                    already: true,
                });
            }
            CancelTarget::Cancel {
                cluster,
                expected_last_subject_sequence,
            } => (cluster, expected_last_subject_sequence),
        };
        let scope = subjects::job(&cluster, &request.job_id);
        let subject = subjects::job_event(&cluster, &request.job_id, "job_cancelled");
        // The expected sequence still keeps two instances from both cancelling: one of them
        // meets a conflict, then the other's cancellation.
        let message_id = if id_taken {
            format!("{}:{expected}", headers::cancel_id(&request.job_id))
        } else {
            headers::cancel_id(&request.job_id)
        };
        let envelope = Envelope {
            message_id,
            trace,
            expected_last_subject_sequence: Some((expected, Some(scope.clone()))),
            ..Default::default()
        };
        let body = Body::JobCancelled(pb::JobCancelled {
            job_id: request.job_id.clone(),
            reason: request.reason.clone(),
            requested_by: request.requested_by.clone(),
        });
        match shared.append(subject, body, &envelope).await {
            Ok((sequence, duplicate)) => {
                // The stream took it for a repeat of the entry at `sequence`: a cancellation
                // written a moment ago, or a message some other publisher wrote under the
                // cancel's id, which cancelled nothing. Only the first is an answer.
                if duplicate && !cancels(shared, sequence, &request.job_id).await? {
                    tracing::warn!(
                        job_id = %request.job_id,
                        sequence,
                        "the cancel's message id is taken by an entry that cancels nothing; \
                         cancelling under another id"
                    );
                    id_taken = true;
                    continue;
                }
                tracing::info!(job_id = %request.job_id, sequence, duplicate, "job cancelled");
                return Ok(pb::Cancelled {
                    job_id: request.job_id.clone(),
                    stream_sequence: sequence,
                    already: duplicate,
                });
            }
            Err(AppendError::Conflict) => {
                // The job moved on (started, finished, ...) since the fold last saw it: wait
                // until the fold has its newest event, then decide again.
                let newest = newest_sequence(&shared.events, &scope)
                    .await
                    .map_err(|e| unavailable(&e))?;
                if !shared.wait_applied(newest, CATCH_UP).await {
                    return Err(unavailable("the fold is behind the log"));
                }
            }
            Err(e) => return Err(rejection_of(e, Retry::Cancel)),
        }
    }
    Err(unavailable("the job kept changing while cancelling"))
}

/// Whether the log's entry at `sequence` is a cancellation of job `job_id`.
async fn cancels(shared: &Shared, sequence: u64, job_id: &str) -> Result<bool, pb::Rejection> {
    let entry = shared
        .read_event(sequence)
        .await
        .map_err(|e| unavailable(&e))?;
    Ok(matches!(entry.and_then(|e| e.body), Some(Body::JobCancelled(c)) if c.job_id == job_id))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use fairshare_model::shape::Shape;
    use fairshare_runtime::clock::{Clock, SystemClock};

    use super::*;
    use crate::domain::{Limits, SubmissionState, job_submitted};

    fn cancel_request(job_id: &str) -> pb::CancelRequest {
        pb::CancelRequest {
            job_id: job_id.into(),
            ..Default::default()
        }
    }

    /// Job j-1 (one GPU, key k-1, cluster c) accepted at `at_ms`, written to the log and not
    /// folded here: its sequence and event.
    async fn submit_j1(js: &async_nats::jetstream::Context, at_ms: i64) -> (u64, pb::Event) {
        let request = super::super::shared::tests::one_gpu_request("k-1");
        let shape = Shape {
            nodes: 1,
            gpus_per_node: 1,
        };
        let submitted = pb::Event {
            at_ms,
            body: Some(Body::JobSubmitted(job_submitted("j-1", &request, shape))),
        };
        let sequence = js
            .publish(
                subjects::job_event("c", "j-1", "job_submitted"),
                codec::encode(&submitted),
            )
            .await
            .unwrap()
            .await
            .unwrap()
            .sequence;
        (sequence, submitted)
    }

    /// Instances sharing the cancels: one may be asked about a job another accepted a moment
    /// ago, before its own fold has it. It waits for its fold rather than answer "unknown",
    /// which a launcher takes as final.
    #[tokio::test]
    async fn a_cancel_waits_for_a_job_the_log_has_and_the_fold_not_yet() {
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server.jetstream(Duration::from_secs(5)).await.unwrap();
        let clock = Arc::new(SystemClock);
        let shared = Arc::new(
            Shared::new(
                js.clone(),
                Limits::default(),
                clock.clone(),
                SubmissionState::default(),
            )
            .await
            .unwrap(),
        );
        // Another instance accepts job j-1: it is in the log, not in this fold.
        let (sequence, submitted) = submit_j1(&js, clock.now_ms()).await;

        // A job the log has never seen is unknown at once.
        let unknown = cancel(&shared, &cancel_request("j-2"), None)
            .await
            .unwrap_err();
        assert_eq!(unknown.code, RejectionCode::UnknownJob as i32);

        // This fold reaches j-1 only a moment after the cancel comes in.
        let follower = {
            let shared = shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                shared.state().apply(sequence, &submitted);
                shared.set_applied(sequence);
            })
        };
        let cancelled = cancel(&shared, &cancel_request("j-1"), None).await.unwrap();
        follower.await.unwrap();
        assert_eq!(cancelled.job_id, "j-1");
        assert!(cancelled.stream_sequence > sequence, "{cancelled:?}");
    }

    /// A launcher may publish its own jobs' events with any message id. One that takes a
    /// cancel's id (`cancel:<job>`) makes the stream drop the real cancellation as a repeat;
    /// the service reads back what holds the id, sees it cancels nothing, and cancels under
    /// another id, rather than answering "cancelled already" while the job runs on.
    #[tokio::test]
    async fn a_cancel_whose_message_id_another_publisher_took_still_cancels() {
        let (_server, js, shared) = super::super::shared::tests::fresh_shared().await;
        let logged = super::super::shared::tests::log_cluster_c(&js).await;
        let clock = SystemClock;
        let (sequence, submitted) = submit_j1(&js, clock.now_ms()).await;
        // Another job's start, published under j-1's cancel id.
        let mut squat = async_nats::HeaderMap::new();
        squat.insert("Nats-Msg-Id", headers::cancel_id("j-1").as_str());
        let started = pb::Event {
            at_ms: clock.now_ms(),
            body: Some(Body::JobStarted(pb::JobStarted {
                job_id: "j-2".into(),
            })),
        };
        let squatter = js
            .publish_with_headers(
                subjects::job_event("c", "j-2", "job_started"),
                squat,
                codec::encode(&started),
            )
            .await
            .unwrap()
            .await
            .unwrap()
            .sequence;
        for (s, event) in logged.iter().chain([(sequence, submitted)].iter()) {
            shared.state().apply(*s, event);
            shared.set_applied(*s);
        }
        let cancelled = cancel(&shared, &cancel_request("j-1"), None).await.unwrap();
        assert!(!cancelled.already, "{cancelled:?}");
        assert!(cancelled.stream_sequence > squatter, "{cancelled:?}");
        let written = shared
            .read_event(cancelled.stream_sequence)
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(written.body, Some(Body::JobCancelled(ref c)) if c.job_id == "j-1"),
            "{written:?}"
        );
    }
}
