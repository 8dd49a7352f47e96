//! How long a service waits before it tries again after writes of unknown outcome.
//!
//! Place in the flow: the decision service after a cycle whose placements were not
//! acknowledged, and the preemption service after a pass whose effects were not, settle what
//! became of them and decide again; a server that refuses every write (a full disk, a lost
//! quorum) must not be asked again and again without pause.

use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;

use crate::envelope::Envelope;

/// Whether a publish that failed this way may still be stored, or be in flight: a timeout, a
/// broken connection, and any other refusal the client does not name (`Other`: a server busy
/// with the same message id, but also a full disk or a size limit, which are kept unknown on
/// purpose: settling one as "not stored" when it was would give its GPUs away twice). The
/// named ones are answers: the message is not stored (a wrong expected sequence or message
/// id, no stream, over the client's payload limit or its limit of messages in flight).
pub fn outcome_unknown(kind: PublishErrorKind) -> bool {
    matches!(
        kind,
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe | PublishErrorKind::Other
    )
}

/// What the server said to a message sent again after its first send went unanswered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResendAnswer {
    /// Stored, now or by the first send (a repeat): at this sequence.
    Stored(u64),
    /// Not stored: the subject moved (perhaps by the first send) or the message was refused
    /// for good. Its subject's newest event says where the log is.
    Refused,
    /// Still unknown: ask again later.
    Unknown(String),
}

/// Reads the answer to a message sent again (see [`ResendAnswer`]).
pub fn resend_answer(answer: Result<PublishAck, PublishError>) -> ResendAnswer {
    match answer {
        Ok(ack) if ack.sequence > 0 => ResendAnswer::Stored(ack.sequence),
        // A server that answers a repeat whose first send it is still storing with sequence 0.
        Ok(_) => {
            ResendAnswer::Unknown("the first send is still being stored; asking again".to_owned())
        }
        Err(e) if outcome_unknown(e.kind()) => ResendAnswer::Unknown(e.to_string()),
        Err(_) => ResendAnswer::Refused,
    }
}

/// Sends, on `subject`, a message the server is sure to refuse (empty, expecting no entry at
/// all over `scope`, which holds one), and waits for its answer: this connection's earlier
/// sends reach the stream before it, so once it is answered, a first send still in the
/// client's reconnect buffer has landed, and a lookup made after it sees that send. A lookup
/// alone could answer first. `Err` if no answer came (try again later). Stored after all (no
/// entry over `scope`), it is an empty entry the folds skip.
pub async fn barrier(
    js: &jetstream::Context,
    subject: String,
    scope: String,
    message_id: String,
) -> Result<(), String> {
    let envelope = Envelope {
        message_id,
        expected_last_subject_sequence: Some((0, Some(scope))),
        ..Default::default()
    };
    let answer = match js
        .publish_with_headers(subject, envelope.to_headers(), bytes::Bytes::new())
        .await
    {
        Ok(ack) => ack.await,
        Err(e) => Err(e),
    };
    match resend_answer(answer) {
        ResendAnswer::Unknown(why) => Err(why),
        ResendAnswer::Refused | ResendAnswer::Stored(_) => Ok(()),
    }
}

/// The wait before trying again after `failed_before` tries in a row failed: at once the first
/// time (a lone timeout), then doubling from 250 ms up to 8 s.
pub fn failure_backoff(failed_before: u32) -> Duration {
    match failed_before {
        0 => Duration::ZERO,
        n => Duration::from_millis(250u64.saturating_mul(1 << (n - 1).min(5))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn failed_tries_back_off_to_a_cap() {
        let waits: Vec<u64> = (0..9)
            .map(|n| super::failure_backoff(n).as_millis() as u64)
            .collect();
        assert_eq!(waits, [0, 250, 500, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(super::failure_backoff(u32::MAX).as_millis(), 8000);
    }
}
