//! Headers every published message carries (see [`fairshare_events::headers`]).

use async_nats::HeaderMap;
use fairshare_events::headers::{self, TraceParent};

/// What a service knows about a message it is about to publish.
#[derive(Debug, Clone, Default)]
pub struct Envelope {
    /// Deterministic id; JetStream drops a repeat inside the duplicate window.
    pub message_id: String,
    /// Message id of the cause, if any.
    pub causation_id: Option<String>,
    /// Trace context to hand on.
    pub trace: Option<TraceParent>,
    /// The launcher's idempotency key, on submission results.
    pub idempotency_key: Option<String>,
    /// Optimistic concurrency: the last sequence seen on `scope` (0 = nothing there yet), and
    /// the subject filter it covers (`None`: the published subject itself).
    pub expected_last_subject_sequence: Option<(u64, Option<String>)>,
}

impl Envelope {
    /// The NATS headers for this envelope.
    pub fn to_headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(headers::MESSAGE_ID, self.message_id.as_str());
        if let Some(c) = &self.causation_id {
            h.insert(headers::CAUSATION_ID, c.as_str());
        }
        if let Some(t) = &self.trace {
            h.insert(headers::TRACEPARENT, t.to_string().as_str());
        }
        if let Some(k) = &self.idempotency_key {
            h.insert(headers::IDEMPOTENCY_KEY, k.as_str());
        }
        if let Some((sequence, scope)) = &self.expected_last_subject_sequence {
            h.insert(
                headers::EXPECTED_LAST_SUBJECT_SEQUENCE,
                sequence.to_string().as_str(),
            );
            if let Some(scope) = scope {
                h.insert(
                    headers::EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT,
                    scope.as_str(),
                );
            }
        }
        h
    }
}

/// The trace context a message arrived with, if it carried a valid one.
pub fn incoming_trace(headers: Option<&HeaderMap>) -> Option<TraceParent> {
    let value = headers?.get(headers::TRACEPARENT)?;
    TraceParent::parse(value.as_str()).ok()
}
