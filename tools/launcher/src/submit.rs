//! Submitting as the contract asks a launcher to: one idempotency key per job, sent again until
//! an answer comes.
//!
//! Place in the flow: a launcher's request on `fairshare.api.submit`, answered by the
//! submission service with `Accepted` or `Rejected`. No reply in time (the service restarting,
//! a cluster member dying under it), a reply that does not decode, and `Unavailable` (the log
//! could not be written, for example while JetStream elects a new stream leader) say nothing
//! was decided yet; the same
//! request again is safe because the service de-duplicates by the key, so a job accepted on a
//! try whose answer was lost is answered as a duplicate, never placed twice. Every other
//! rejection is final.

use std::time::{Duration, Instant};

use fairshare_events::headers::TRACEPARENT;
use fairshare_events::pb::{self, RejectionCode};
use fairshare_events::{codec, subjects};
use fairshare_runtime::telemetry::{Handling, Relation, Role};

/// How long to keep trying one submission.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// How long one try waits for its answer.
    pub attempt_timeout: Duration,
    /// Pause between tries (doubling up to 8 times this).
    pub backoff: Duration,
    /// When to give up, from the first try.
    pub give_up_after: Duration,
}

impl Default for Retry {
    /// 5 s per try, from 250 ms apart, for up to 2 minutes.
    fn default() -> Self {
        Retry {
            attempt_timeout: Duration::from_secs(5),
            backoff: Duration::from_millis(250),
            give_up_after: Duration::from_secs(120),
        }
    }
}

/// Why a submission got no final answer.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// Every try went unanswered, was answered `Unavailable`, or got a reply that does not
    /// decode, until `give_up_after`.
    #[error("no final answer after {attempts} tries: {last}")]
    GaveUp {
        /// Tries made.
        attempts: u32,
        /// What the last one got.
        last: String,
    },
}

/// Sends `request` and returns the service's final answer: `Accepted` (perhaps a duplicate
/// of an earlier try) or a rejection other than `Unavailable`.
pub async fn submit(
    client: &async_nats::Client,
    request: &pb::SubmitRequest,
    retry: Retry,
) -> Result<pb::SubmitReply, SubmitError> {
    let body = codec::encode(request);
    // The launcher's span is the trace's root: every try carries it, so the submission
    // service's span (and all that follows) is its child.
    let span = Handling::start(
        "launcher submit",
        Role::Call,
        None,
        Relation::Child,
        &[("fairshare.idempotency_key", &request.idempotency_key)],
    );
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(TRACEPARENT, span.hand_on().to_string().as_str());
    let started = Instant::now();
    let mut pause = retry.backoff;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let last = match tokio::time::timeout(
            retry.attempt_timeout,
            client.request_with_headers(subjects::SUBMIT_API, headers.clone(), body.clone()),
        )
        .await
        {
            Err(_) => format!("no answer within {:?}", retry.attempt_timeout),
            Ok(Err(e)) => e.to_string(),
            // A reply that is not a `SubmitReply`, or holds no result, says nothing of the
            // outcome either (the job may have been accepted): asked again with the same key,
            // the service answers for it.
            Ok(Ok(message)) => match codec::decode_submit_reply(&message.payload) {
                Err(e) => format!("a reply that is not a SubmitReply: {e}"),
                Ok(reply) => match &reply.result {
                    None => "a reply with neither accepted nor rejected".to_owned(),
                    Some(pb::submit_reply::Result::Rejected(r))
                        if r.code == RejectionCode::Unavailable as i32 =>
                    {
                        r.message.clone()
                    }
                    Some(_) => return Ok(reply),
                },
            },
        };
        if started.elapsed() + pause >= retry.give_up_after {
            return Err(SubmitError::GaveUp { attempts, last });
        }
        tracing::debug!(
            key = request.idempotency_key,
            "submission not answered, retrying: {last}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(retry.backoff * 8);
    }
}
