//! `fairshare.api.cancel`: end a job that has not ended, on the job's own subject.

use std::sync::Arc;
use std::time::Duration;

use fairshare_events::pb::{self, cancel_reply, event::Body};
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
    let Some(reply_to) = msg.reply.clone() else {
        tracing::warn!("cancel request without a reply subject ignored");
        return;
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
    for _ in 0..ATTEMPTS {
        let target = check_cancel(&shared.state(), request, &shared.limits)?;
        let (cluster, expected) = match target {
            CancelTarget::AlreadyCancelled { sequence } => {
                return Ok(pb::Cancelled {
                    job_id: request.job_id.clone(),
                    stream_sequence: sequence,
                });
            }
            CancelTarget::Cancel {
                cluster,
                expected_last_subject_sequence,
            } => (cluster, expected_last_subject_sequence),
        };
        let scope = subjects::job(&cluster, &request.job_id);
        let subject = subjects::job_event(&cluster, &request.job_id, "job_cancelled");
        let envelope = Envelope {
            message_id: headers::cancel_id(&request.job_id),
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
            Ok((sequence, _duplicate)) => {
                tracing::info!(job_id = %request.job_id, sequence, "job cancelled");
                return Ok(pb::Cancelled {
                    job_id: request.job_id.clone(),
                    stream_sequence: sequence,
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
