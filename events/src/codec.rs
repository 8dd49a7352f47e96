//! Encoding and decoding of everything on the wire, with errors that name what was wrong.
//!
//! Services decode every message they take from NATS through these functions, so a malformed
//! message is reported the same way everywhere and never panics.

use prost::Message;

use crate::pb;

/// Why bytes taken from NATS are not a usable message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The message had no bytes at all.
    #[error("empty message: expected a protobuf-encoded {expected}")]
    Empty {
        /// The message type that was expected.
        expected: &'static str,
    },
    /// The bytes are not valid protobuf for the expected type.
    #[error("malformed {expected}: {detail}")]
    Malformed {
        /// The message type that was expected.
        expected: &'static str,
        /// What prost found wrong (wire type, truncation, invalid UTF-8, ...).
        detail: String,
    },
    /// An event decoded but carries no body this version knows: either the body is missing or
    /// it was written by a newer schema version.
    #[error("event has no body this version understands (missing, or written by a newer schema)")]
    UnknownBody,
    /// A request carries a field this build's schema does not define (a launcher built for a
    /// newer schema): decoding would drop it silently, and the log would never hold it.
    #[error(
        "{expected} carries {field}, which this build's schema does not define (a launcher \
         built for a newer schema?): it would be dropped; leave it unset, or upgrade the service"
    )]
    UnknownField {
        /// The message type that was expected.
        expected: &'static str,
        /// Which field, as "JobSpec field 12".
        field: String,
    },
    /// A log entry decoded, but its event is not on the subject its kind is written to
    /// ([`crate::subjects::check_filed`]): folded as empty, so no writer acts beyond its
    /// subjects' permissions.
    #[error("misfiled event: {0}")]
    Misfiled(#[from] crate::subjects::Misfiled),
}

/// Encodes any contract message to bytes.
pub fn encode<M: Message>(message: &M) -> bytes::Bytes {
    bytes::Bytes::from(message.encode_to_vec())
}

/// How many bytes [`encode`] makes of `message`, without making them.
pub fn encoded_len<M: Message>(message: &M) -> usize {
    message.encoded_len()
}

/// How many bytes `message` takes inside another message, as a length-delimited field: its
/// own bytes and their length, without the field's key.
pub fn delimited_len<M: Message>(message: &M) -> usize {
    let len = message.encoded_len();
    len + prost::length_delimiter_len(len)
}

fn decode<M: Message + Default>(bytes: &[u8], expected: &'static str) -> Result<M, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Empty { expected });
    }
    M::decode(bytes).map_err(|e| DecodeError::Malformed {
        expected,
        detail: e.to_string(),
    })
}

/// Decodes one log entry; an event without a known body is an error, not a silent no-op.
pub fn decode_event(bytes: &[u8]) -> Result<pb::Event, DecodeError> {
    let event: pb::Event = decode(bytes, "fairshare.v1.Event")?;
    if event.body.is_none() {
        return Err(DecodeError::UnknownBody);
    }
    Ok(event)
}

/// Decodes one log entry stored on `subject`: [`decode_event`], and the event must be on the
/// subject its kind and cluster belong to ([`crate::subjects::check_filed`]). What every
/// service folds the log with.
pub fn decode_log_entry(subject: &str, bytes: &[u8]) -> Result<pb::Event, DecodeError> {
    let event = decode_event(bytes)?;
    crate::subjects::check_filed(subject, &event)?;
    Ok(event)
}

/// Decodes a submit request (request/reply or intake).
pub fn decode_submit_request(bytes: &[u8]) -> Result<pb::SubmitRequest, DecodeError> {
    const EXPECTED: &str = "fairshare.v1.SubmitRequest";
    let request = decode(bytes, EXPECTED)?;
    if let Some(field) = unknown_submit_field(bytes) {
        return Err(DecodeError::UnknownField {
            expected: EXPECTED,
            field,
        });
    }
    Ok(request)
}

/// The field numbers `SubmitRequest` and `JobSpec` define (`schemas/fairshare/v1/
/// fairshare.proto`): a test checks them against the generated types.
const SUBMIT_REQUEST_FIELDS: std::ops::RangeInclusive<u32> = 1..=2;
const JOB_SPEC_FIELDS: std::ops::RangeInclusive<u32> = 1..=11;
/// `SubmitRequest.spec`.
const SPEC_FIELD: u32 = 2;

/// The first field of a `SubmitRequest`'s bytes, or of its `JobSpec`'s, that this build does
/// not define, in words; `None` if there is none (or the bytes are not walkable protobuf, which
/// decoding reports).
fn unknown_submit_field(bytes: &[u8]) -> Option<String> {
    let mut spec_unknown = None;
    let top = first_unknown_field(bytes, &SUBMIT_REQUEST_FIELDS, &mut |number, value| {
        if number == SPEC_FIELD
            && spec_unknown.is_none()
            && let Some(nested) = value
        {
            spec_unknown = first_unknown_field(nested, &JOB_SPEC_FIELDS, &mut |_, _| {});
        }
    });
    top.map(|n| format!("SubmitRequest field {n}"))
        .or_else(|| spec_unknown.map(|n| format!("JobSpec field {n}")))
}

/// Walks the protobuf fields of `bytes`, calling `each` with every field's number and, for a
/// length-delimited one, its bytes; returns the first number outside `known`. Stops (`None`)
/// at bytes that are not protobuf.
fn first_unknown_field<'b>(
    mut bytes: &'b [u8],
    known: &std::ops::RangeInclusive<u32>,
    each: &mut dyn FnMut(u32, Option<&'b [u8]>),
) -> Option<u32> {
    fn varint(bytes: &mut &[u8]) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first()?;
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    fn skip<'b>(bytes: &mut &'b [u8], n: u64) -> Option<&'b [u8]> {
        let n = usize::try_from(n).ok()?;
        let (taken, rest) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = rest;
        Some(taken)
    }
    let mut unknown = None;
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let number = u32::try_from(key >> 3).ok()?;
        let value = match key & 7 {
            0 => varint(&mut bytes).map(|_| None)?,
            1 => skip(&mut bytes, 8).map(|_| None)?,
            2 => {
                let len = varint(&mut bytes)?;
                Some(skip(&mut bytes, len)?)
            }
            5 => skip(&mut bytes, 4).map(|_| None)?,
            // Groups (3, 4) are in no message of this schema; decoding judges them.
            _ => return None,
        };
        if !known.contains(&number) && unknown.is_none() {
            unknown = Some(number);
        }
        each(number, value);
    }
    unknown
}

/// Decodes a submit reply.
pub fn decode_submit_reply(bytes: &[u8]) -> Result<pb::SubmitReply, DecodeError> {
    decode(bytes, "fairshare.v1.SubmitReply")
}

/// Decodes a cancel request.
pub fn decode_cancel_request(bytes: &[u8]) -> Result<pb::CancelRequest, DecodeError> {
    decode(bytes, "fairshare.v1.CancelRequest")
}

/// Decodes a cancel reply.
pub fn decode_cancel_reply(bytes: &[u8]) -> Result<pb::CancelReply, DecodeError> {
    decode(bytes, "fairshare.v1.CancelReply")
}

/// Decodes a usage query.
pub fn decode_usage_query(bytes: &[u8]) -> Result<pb::UsageQuery, DecodeError> {
    decode(bytes, "fairshare.v1.UsageQuery")
}

/// Decodes a usage reply.
pub fn decode_usage_reply(bytes: &[u8]) -> Result<pb::UsageReply, DecodeError> {
    decode(bytes, "fairshare.v1.UsageReply")
}

/// Decodes an explain request.
pub fn decode_explain_request(bytes: &[u8]) -> Result<pb::ExplainRequest, DecodeError> {
    decode(bytes, "fairshare.v1.ExplainRequest")
}

/// Decodes an explain reply.
pub fn decode_explain_reply(bytes: &[u8]) -> Result<pb::ExplainReply, DecodeError> {
    decode(bytes, "fairshare.v1.ExplainReply")
}

/// Decodes a queue listing request. Unlike the other messages, no bytes at all is a valid
/// request: every field at its default (every job, the most the service lists), which
/// protobuf encodes as nothing.
pub fn decode_queue_request(bytes: &[u8]) -> Result<pb::QueueRequest, DecodeError> {
    if bytes.is_empty() {
        return Ok(pb::QueueRequest::default());
    }
    decode(bytes, "fairshare.v1.QueueRequest")
}

/// Decodes a queue listing reply.
pub fn decode_queue_reply(bytes: &[u8]) -> Result<pb::QueueReply, DecodeError> {
    decode(bytes, "fairshare.v1.QueueReply")
}

/// Every name [`event_kind`] gives a body, in schema order: what filters by kind may name.
pub const EVENT_KINDS: [&str; 19] = [
    "job_submitted",
    "job_rejected",
    "job_cancelled",
    "job_placed",
    "job_started",
    "job_finished",
    "job_failed",
    "preemption_ordered",
    "job_preempted",
    "job_requeued",
    "budget_tree_set",
    "node_registered",
    "node_cordoned",
    "node_uncordoned",
    "node_drained",
    "maintenance_scheduled",
    "node_removed",
    "maintenance_cancelled",
    "usage_snapshot",
];

/// A short, stable name for an event's kind, for logs, `tail` output and filters.
pub fn event_kind(event: &pb::Event) -> &'static str {
    use pb::event::Body;
    match &event.body {
        None => "unknown",
        Some(Body::JobSubmitted(_)) => "job_submitted",
        Some(Body::JobRejected(_)) => "job_rejected",
        Some(Body::JobCancelled(_)) => "job_cancelled",
        Some(Body::JobPlaced(_)) => "job_placed",
        Some(Body::JobStarted(_)) => "job_started",
        Some(Body::JobFinished(_)) => "job_finished",
        Some(Body::JobFailed(_)) => "job_failed",
        Some(Body::PreemptionOrdered(_)) => "preemption_ordered",
        Some(Body::JobPreempted(_)) => "job_preempted",
        Some(Body::JobRequeued(_)) => "job_requeued",
        Some(Body::BudgetTreeSet(_)) => "budget_tree_set",
        Some(Body::NodeRegistered(_)) => "node_registered",
        Some(Body::NodeCordoned(_)) => "node_cordoned",
        Some(Body::NodeUncordoned(_)) => "node_uncordoned",
        Some(Body::NodeDrained(_)) => "node_drained",
        Some(Body::MaintenanceScheduled(_)) => "maintenance_scheduled",
        Some(Body::NodeRemoved(_)) => "node_removed",
        Some(Body::MaintenanceCancelled(_)) => "maintenance_cancelled",
        Some(Body::UsageSnapshot(_)) => "usage_snapshot",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of `JobSpec` set (a struct literal with no default, so a field added to the
    /// schema fails to compile here: add it, and widen `JOB_SPEC_FIELDS`).
    fn full_request() -> pb::SubmitRequest {
        pb::SubmitRequest {
            idempotency_key: "k".into(),
            spec: Some(pb::JobSpec {
                cluster: "c".into(),
                allocation: "a".into(),
                user: "u".into(),
                gpus: 8,
                nodes: 1,
                min_runtime_s: 60,
                resumable: true,
                priority: -3,
                time_limit_s: 3_600,
                payload: vec![1, 2, 3].into(),
                name: "n".into(),
            }),
        }
    }

    #[test]
    fn a_submit_request_field_this_schema_does_not_define_is_refused_by_name() {
        let bytes = encode(&full_request()).to_vec();
        assert_eq!(decode_submit_request(&bytes), Ok(full_request()));
        // Every field of the full request is known, and the highest is the range's end.
        let mut numbers = Vec::new();
        first_unknown_field(&bytes, &SUBMIT_REQUEST_FIELDS, &mut |n, v| {
            if n == SPEC_FIELD {
                first_unknown_field(v.unwrap(), &JOB_SPEC_FIELDS, &mut |n, _| numbers.push(n));
            }
        });
        assert_eq!(numbers.iter().max(), Some(JOB_SPEC_FIELDS.end()));
        // A newer launcher's JobSpec field 12 (varint 1) inside the spec.
        let mut spec = encode(full_request().spec.as_ref().unwrap()).to_vec();
        spec.extend([12 << 3, 1]);
        let mut newer = vec![(1 << 3) | 2, 1, b'k', (2 << 3) | 2];
        newer.push(u8::try_from(spec.len()).unwrap());
        newer.extend(&spec);
        match decode_submit_request(&newer) {
            Err(DecodeError::UnknownField { field, .. }) => assert_eq!(field, "JobSpec field 12"),
            other => panic!("{other:?}"),
        }
        // At the top: field 3, length-delimited.
        let mut top = bytes.clone();
        top.extend([(3 << 3) | 2, 2, b'h', b'i']);
        let refused = decode_submit_request(&top).unwrap_err();
        assert!(
            refused.to_string().contains("SubmitRequest field 3"),
            "{refused}"
        );
    }

    #[test]
    fn every_kind_name_is_listed() {
        use pb::event::Body;
        let bodies = [
            Body::JobSubmitted(Default::default()),
            Body::JobRejected(Default::default()),
            Body::JobCancelled(Default::default()),
            Body::JobPlaced(Default::default()),
            Body::JobStarted(Default::default()),
            Body::JobFinished(Default::default()),
            Body::JobFailed(Default::default()),
            Body::PreemptionOrdered(Default::default()),
            Body::JobPreempted(Default::default()),
            Body::JobRequeued(Default::default()),
            Body::BudgetTreeSet(Default::default()),
            Body::NodeRegistered(Default::default()),
            Body::NodeCordoned(Default::default()),
            Body::NodeUncordoned(Default::default()),
            Body::NodeDrained(Default::default()),
            Body::MaintenanceScheduled(Default::default()),
            Body::NodeRemoved(Default::default()),
            Body::MaintenanceCancelled(Default::default()),
            Body::UsageSnapshot(Default::default()),
        ];
        // Exhaustive: a body added to the schema does not compile here until it is listed
        // (and given its place in `EVENT_KINDS`).
        let place = |b: &Body| match b {
            Body::JobSubmitted(_) => 0,
            Body::JobRejected(_) => 1,
            Body::JobCancelled(_) => 2,
            Body::JobPlaced(_) => 3,
            Body::JobStarted(_) => 4,
            Body::JobFinished(_) => 5,
            Body::JobFailed(_) => 6,
            Body::PreemptionOrdered(_) => 7,
            Body::JobPreempted(_) => 8,
            Body::JobRequeued(_) => 9,
            Body::BudgetTreeSet(_) => 10,
            Body::NodeRegistered(_) => 11,
            Body::NodeCordoned(_) => 12,
            Body::NodeUncordoned(_) => 13,
            Body::NodeDrained(_) => 14,
            Body::MaintenanceScheduled(_) => 15,
            Body::NodeRemoved(_) => 16,
            Body::MaintenanceCancelled(_) => 17,
            Body::UsageSnapshot(_) => 18,
        };
        assert_eq!(bodies.len(), EVENT_KINDS.len());
        for b in bodies {
            let i = place(&b);
            let event = pb::Event {
                at_ms: 0,
                body: Some(b),
            };
            assert_eq!(event_kind(&event), EVENT_KINDS[i]);
        }
    }

    #[test]
    fn empty_bytes_are_named_empty() {
        assert_eq!(
            decode_event(&[]),
            Err(DecodeError::Empty {
                expected: "fairshare.v1.Event"
            })
        );
    }

    #[test]
    fn garbage_is_malformed_with_detail() {
        // 0xff is field 31 with wire type 7, which does not exist.
        let err = decode_submit_request(&[0xff, 0xff, 0xff]).unwrap_err();
        match err {
            DecodeError::Malformed { expected, detail } => {
                assert_eq!(expected, "fairshare.v1.SubmitRequest");
                assert!(!detail.is_empty());
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn truncated_message_is_malformed() {
        let bytes = encode(&pb::SubmitRequest {
            idempotency_key: "k".repeat(40),
            spec: None,
        });
        let err = decode_submit_request(&bytes[..10]).unwrap_err();
        assert!(matches!(err, DecodeError::Malformed { .. }), "{err:?}");
    }

    #[test]
    fn event_without_body_is_rejected() {
        let bytes = encode(&pb::Event {
            at_ms: 5,
            body: None,
        });
        assert_eq!(decode_event(&bytes), Err(DecodeError::UnknownBody));
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let event = pb::Event {
            at_ms: 42,
            body: Some(pb::event::Body::JobSubmitted(pb::JobSubmitted {
                job_id: "0190".into(),
                idempotency_key: "key".into(),
                spec: Some(pb::JobSpec {
                    cluster: "alpha".into(),
                    allocation: "a/b".into(),
                    gpus: 16,
                    nodes: 2,
                    min_runtime_s: 900,
                    payload: bytes::Bytes::from_static(b"run"),
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes: 2,
                    gpus_per_node: 8,
                }),
            })),
        };
        let decoded = decode_event(&encode(&event)).unwrap();
        assert_eq!(decoded, event);
        assert_eq!(event_kind(&decoded), "job_submitted");
    }
}
