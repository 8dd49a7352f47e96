//! A simulated log on disk: the contract's events, each length-delimited protobuf, in order.
//!
//! Place in the flow: the bridge from the simulator to a real deployment. `fairshare-sim run
//! --log FILE` writes it; `fairshare-sim load FILE` publishes it to JetStream on the subjects a
//! service would have used ([`fairshare_events::subjects::for_event`]), where the decision
//! service's audit (`fairshare-decision --audit`) re-derives every placement from it.

use fairshare_events::pb;
use prost::Message;

/// Why a log file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LogFileError {
    /// The bytes are not a sequence of length-delimited events.
    #[error("log file: event {index} at byte {offset} does not decode: {source}")]
    Decode {
        /// 0-based index of the event.
        index: usize,
        /// Byte offset where it starts.
        offset: usize,
        /// The decoder's complaint.
        source: prost::DecodeError,
    },
}

/// The bytes of a log file holding `events`.
pub fn encode(events: &[pb::Event]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        // Writing to a Vec cannot run out of room.
        let _ = e.encode_length_delimited(&mut out);
    }
    out
}

/// The events of a log file.
pub fn decode(mut bytes: &[u8]) -> Result<Vec<pb::Event>, LogFileError> {
    let total = bytes.len();
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let offset = total - bytes.len();
        let event = pb::Event::decode_length_delimited(&mut bytes).map_err(|source| {
            LogFileError::Decode {
                index: out.len(),
                offset,
                source,
            }
        })?;
        out.push(event);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let events = vec![
            pb::Event {
                at_ms: 5,
                body: Some(pb::event::Body::JobStarted(pb::JobStarted {
                    job_id: "j".into(),
                })),
            },
            pb::Event {
                at_ms: 6,
                body: None,
            },
        ];
        let bytes = encode(&events);
        assert_eq!(decode(&bytes).unwrap(), events);
        let err = decode(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(
            matches!(err, LogFileError::Decode { index: 1, .. }),
            "{err}"
        );
    }
}
