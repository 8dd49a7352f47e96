//! How enumeration fields read in JSON (`fairshare tail --json`): by the name the schema gives
//! the value (`PREEMPTION_CAUSE_SHARE_FLOOR`), not by its number, so an operator's filter reads
//! like the schema. A value this build does not know (a newer writer's) stays a number. A
//! job's payload reads as its text.
//!
//! The generated types name these functions in `serialize_with` attributes (see `build.rs`).

use serde::Serializer;

use crate::pb::{PreemptionCause, RejectionCode};

/// `Rejection.code` by name.
pub(crate) fn rejection_code<S: Serializer>(value: &i32, s: S) -> Result<S::Ok, S::Error> {
    match RejectionCode::try_from(*value) {
        Ok(code) => s.serialize_str(code.as_str_name()),
        Err(_) => s.serialize_i32(*value),
    }
}

/// `JobSpec.payload` as the text it holds (a command line, an image name), or, for bytes that
/// are not UTF-8, `{"hex": "..."}`: a list of byte values helps no reader.
pub(crate) fn payload<S: Serializer>(value: &bytes::Bytes, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    match std::str::from_utf8(value) {
        Ok(text) => s.serialize_str(text),
        Err(_) => {
            let hex: String = value.iter().map(|b| format!("{b:02x}")).collect();
            let mut map = s.serialize_map(Some(1))?;
            map.serialize_entry("hex", &hex)?;
            map.end()
        }
    }
}

/// `PreemptionOrdered.cause` by name.
pub(crate) fn preemption_cause<S: Serializer>(value: &i32, s: S) -> Result<S::Ok, S::Error> {
    match PreemptionCause::try_from(*value) {
        Ok(cause) => s.serialize_str(cause.as_str_name()),
        Err(_) => s.serialize_i32(*value),
    }
}

#[cfg(test)]
mod tests {
    use crate::pb;

    fn order(cause: i32) -> serde_json::Value {
        let order = pb::PreemptionOrdered {
            job_id: "v".into(),
            cause,
            ..Default::default()
        };
        serde_json::to_value(&order).expect("serializes")
    }

    #[test]
    fn a_payload_reads_as_its_text_or_as_hex() {
        let spec = |payload: &'static [u8]| {
            let spec = pb::JobSpec {
                payload: bytes::Bytes::from_static(payload),
                ..Default::default()
            };
            serde_json::to_value(&spec).expect("serializes")["payload"].clone()
        };
        assert_eq!(spec(b"python train.py"), "python train.py");
        assert_eq!(spec(b""), "");
        assert_eq!(spec(b"\xff\x00a"), serde_json::json!({"hex": "ff0061"}));
    }

    #[test]
    fn causes_read_by_name_and_unknown_ones_by_number() {
        assert_eq!(
            order(pb::PreemptionCause::ShareFloor.into())["cause"],
            "PREEMPTION_CAUSE_SHARE_FLOOR"
        );
        assert_eq!(order(0)["cause"], "PREEMPTION_CAUSE_UNSPECIFIED");
        assert_eq!(order(99)["cause"], 99);
        // The human form (`fairshare tail` without --json) names it too.
        let debug = format!(
            "{:?}",
            pb::PreemptionOrdered {
                cause: pb::PreemptionCause::ShareFloor.into(),
                ..Default::default()
            }
        );
        assert!(debug.contains("cause: ShareFloor"), "{debug}");
    }

    #[test]
    fn rejection_codes_read_by_name_inside_an_event() {
        let event = pb::Event {
            at_ms: 1,
            body: Some(pb::event::Body::JobRejected(pb::JobRejected {
                idempotency_key: "k".into(),
                rejection: Some(pb::Rejection {
                    code: pb::RejectionCode::TooManyGpus.into(),
                    message: "m".into(),
                }),
                ..Default::default()
            })),
        };
        let json = serde_json::to_value(&event).expect("serializes");
        assert_eq!(
            json["body"]["JobRejected"]["rejection"]["code"],
            "REJECTION_CODE_TOO_MANY_GPUS"
        );
    }
}
