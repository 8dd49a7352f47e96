//! Envelope conventions carried in NATS headers.
//!
//! - [`MESSAGE_ID`] (`Nats-Msg-Id`): deterministic per logical effect, so JetStream drops a
//!   repeat inside its duplicate window. The functions below build every id the system uses.
//! - [`TRACEPARENT`] / [`TRACESTATE`]: W3C trace context, carried from the launcher through
//!   every service that acts on the message.
//! - [`IDEMPOTENCY_KEY`]: the launcher's key, repeated in a header so intake results can be
//!   matched without decoding.

use std::fmt;

/// JetStream de-duplication header.
pub const MESSAGE_ID: &str = "Nats-Msg-Id";
/// Optimistic concurrency on the whole stream: the publish lands only if the stream's last
/// sequence is this one.
pub const EXPECTED_LAST_SEQUENCE: &str = "Nats-Expected-Last-Sequence";
/// Optimistic concurrency: the last sequence the publisher saw on this subject.
pub const EXPECTED_LAST_SUBJECT_SEQUENCE: &str = "Nats-Expected-Last-Subject-Sequence";
/// Scope of [`EXPECTED_LAST_SUBJECT_SEQUENCE`]: a subject filter (wildcards allowed), so the
/// check covers every kind of one job's events (nats-server >= 2.11).
pub const EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT: &str =
    "Nats-Expected-Last-Subject-Sequence-Subject";
/// The launcher's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "Fairshare-Idempotency-Key";
/// W3C trace context.
pub const TRACEPARENT: &str = "traceparent";
/// W3C vendor trace state.
pub const TRACESTATE: &str = "tracestate";

/// Message id of the job-submitted or job-rejected event for a launcher's idempotency key.
pub fn submission_id(idempotency_key: &str) -> String {
    format!("submit:{idempotency_key}")
}

/// Message id of a job's cancellation (one per job).
pub fn cancel_id(job_id: &str) -> String {
    format!("cancel:{job_id}")
}

/// Message id of a budget tree or inventory change applied from a file, over the subject's
/// newest sequence before it: a retry of the same change de-duplicates, while the same content
/// applied again after another change (a revert) is a new message.
pub fn policy_id(cluster: &str, kind: &str, content_hash: u64, after_sequence: u64) -> String {
    format!("policy:{cluster}:{kind}:{content_hash:016x}:{after_sequence}")
}

/// A stable 64-bit hash (FNV-1a) of encoded content, for content-derived message ids.
pub fn content_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A W3C `traceparent` value (version 00). Serializable so services can keep each job's
/// context in their checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TraceParent {
    /// 16-byte trace id shared by every span of one trace.
    pub trace_id: u128,
    /// 8-byte id of the parent span.
    pub parent_id: u64,
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

/// Why a `traceparent` header was ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid traceparent {value:?}: expected 00-<32 hex>-<16 hex>-<2 hex> with non-zero ids")]
pub struct TraceParentError {
    /// The value as received.
    pub value: String,
}

impl TraceParent {
    /// Parses a header value, as W3C Trace Context (level 1, section 3.2) asks of a receiver:
    /// version `00` is exactly four fields of lowercase hex; a higher version (not `ff`) is
    /// read for its first four fields, whatever follows them, so a newer sender's context is
    /// kept rather than dropped.
    pub fn parse(value: &str) -> Result<Self, TraceParentError> {
        let err = || TraceParentError {
            value: value.to_owned(),
        };
        let parts: Vec<&str> = value.trim().split('-').collect();
        let (version, fields) = match parts.as_slice() {
            [version, fields @ ..] => (*version, fields),
            [] => return Err(err()),
        };
        let [trace, parent, flags] = match fields {
            [trace, parent, flags] => [*trace, *parent, *flags],
            [trace, parent, flags, ..] if version != "00" => [*trace, *parent, *flags],
            _ => return Err(err()),
        };
        let hex = |field: &str, len: usize| {
            field.len() == len
                && field
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(version, 2)
            || version == "ff"
            || !hex(trace, 32)
            || !hex(parent, 16)
            || !hex(flags, 2)
        {
            return Err(err());
        }
        let trace_id = u128::from_str_radix(trace, 16).map_err(|_| err())?;
        let parent_id = u64::from_str_radix(parent, 16).map_err(|_| err())?;
        let flags = u8::from_str_radix(flags, 16).map_err(|_| err())?;
        if trace_id == 0 || parent_id == 0 {
            return Err(err());
        }
        Ok(Self {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// A new root context with ids from `random` (two independent random values).
    pub fn new_root(random: (u128, u64)) -> Self {
        Self {
            trace_id: random.0.max(1),
            parent_id: random.1.max(1),
            flags: 1,
        }
    }

    /// The context a child span hands on: same trace, new span id.
    pub fn child(&self, span_id: u64) -> Self {
        Self {
            parent_id: span_id.max(1),
            ..*self
        }
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id, self.parent_id, self.flags
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trip() {
        let v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let tp = TraceParent::parse(v).unwrap();
        assert_eq!(tp.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(tp.to_string(), v);
        let child = tp.child(7);
        assert_eq!(child.trace_id, tp.trace_id);
        assert_eq!(
            child.to_string(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000007-01"
        );
    }

    #[test]
    fn traceparent_of_a_later_version_is_read_for_its_first_fields() {
        for v in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds",
        ] {
            let tp = TraceParent::parse(v).unwrap();
            assert_eq!(tp.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
            assert_eq!(tp.parent_id, 0x00f067aa0ba902b7);
            // Handed on as the version this side speaks.
            assert!(tp.to_string().starts_with("00-"));
        }
    }

    #[test]
    fn traceparent_rejects_bad_values() {
        for bad in [
            "",
            "-",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-xyz92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad}");
        }
    }
}
