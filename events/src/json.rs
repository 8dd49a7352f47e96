//! How enumeration fields read in JSON (`fairshare tail --json`): by the name the schema gives
//! the value (`PREEMPTION_CAUSE_SHARE_FLOOR`), not by its number, so an operator's filter reads
//! like the schema. A value this build does not know (a newer writer's) stays a number.
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
