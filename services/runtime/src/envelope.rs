//! Headers every published message carries (see [`fairshare_events::headers`]).

use async_nats::{HeaderMap, HeaderValue};
use fairshare_events::headers::{self, TraceParent};

/// What a service knows about a message it is about to publish.
#[derive(Debug, Clone, Default)]
pub struct Envelope {
    /// Deterministic id; JetStream drops a repeat inside the duplicate window.
    pub message_id: String,
    /// Trace context to hand on.
    pub trace: Option<TraceParent>,
    /// The launcher's idempotency key, on submission results.
    pub idempotency_key: Option<String>,
    /// Optimistic concurrency: the last sequence seen on `scope` (0 = nothing there yet), and
    /// the subject filter it covers (`None`: the published subject itself).
    pub expected_last_subject_sequence: Option<(u64, Option<String>)>,
}

/// `value` as a header value. A NATS header value cannot hold a line break (async-nats
/// panics on one), and ids built from a caller's text (an idempotency key) could: each CR and
/// LF is written as the two characters `\r` or `\n` instead, the same way every time, so the
/// id stays deterministic. Callers reject such text first; this keeps a miss from panicking.
fn header_value(value: &str) -> HeaderValue {
    if value.contains(['\r', '\n']) {
        HeaderValue::from(value.replace('\r', "\\r").replace('\n', "\\n").as_str())
    } else {
        HeaderValue::from(value)
    }
}

impl Envelope {
    /// The NATS headers for this envelope.
    pub fn to_headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(headers::MESSAGE_ID, header_value(&self.message_id));
        if let Some(t) = &self.trace {
            h.insert(headers::TRACEPARENT, t.to_string().as_str());
        }
        if let Some(k) = &self.idempotency_key {
            h.insert(headers::IDEMPOTENCY_KEY, header_value(k));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_break_in_an_id_is_escaped_not_a_panic() {
        let envelope = Envelope {
            message_id: "submit:a\r\nb".into(),
            idempotency_key: Some("a\r\nb".into()),
            ..Default::default()
        };
        let h = envelope.to_headers();
        let id = h.get(headers::MESSAGE_ID).map(|v| v.as_str().to_owned());
        assert_eq!(id.as_deref(), Some("submit:a\\r\\nb"));
        let key = h
            .get(headers::IDEMPOTENCY_KEY)
            .map(|v| v.as_str().to_owned());
        assert_eq!(key.as_deref(), Some("a\\r\\nb"));
        // Plain ids pass through unchanged.
        let plain = Envelope {
            message_id: "placed:j:7".into(),
            ..Default::default()
        };
        let h = plain.to_headers();
        assert_eq!(
            h.get(headers::MESSAGE_ID).map(|v| v.as_str()),
            Some("placed:j:7")
        );
    }
}
