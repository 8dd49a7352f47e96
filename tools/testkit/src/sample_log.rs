//! A fixed log for the checkpoint-format tripwires: each service's tests fold it and pin a
//! fingerprint of the state they would checkpoint, next to the checkpoint's format version.
//!
//! Why: a checkpoint written by one build is resumed by the next only if its version matches,
//! so a change to what a fold keeps (a new field, an event folded differently) must bump the
//! version, or the new build resumes state the old code folded and differs from a rebuild from
//! the log. A fold change that moves the fingerprint of this log fails its service's tripwire
//! until the pair (version, fingerprint) is updated together.
//!
//! The log is the simulator's `cordon-under-load` scenario (`tests/data/checkpoints/`): a
//! budget tree, nodes, submissions, placements, starts, preemption orders, kills and requeues,
//! snapshots, a cordon and a drain. It is a file, not generated, so a policy change (which
//! changes what the simulator writes) moves no fingerprint.

use fairshare_events::{pb, subjects};
use fairshare_runtime::log::LogEntry;
use prost::Message;

/// The sample log's bytes: length-delimited `pb::Event`s, as `fairshare-sim --log` writes them.
const SAMPLE: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/checkpoints/cordon-under-load.log"
));

/// The cluster the sample log is for.
pub const SAMPLE_CLUSTER: &str = "sim";

/// The sample log as a follower of a fresh stream would deliver it: sequences from 1, each
/// entry on its event's subject, stored at its event's time.
///
/// # Panics
/// If the file does not decode (a broken checkout).
pub fn sample_log() -> Vec<LogEntry> {
    let mut bytes = SAMPLE;
    let mut events = Vec::new();
    while !bytes.is_empty() {
        match pb::Event::decode_length_delimited(&mut bytes) {
            Ok(event) => events.push(event),
            Err(e) => panic!("tests/data/checkpoints/cordon-under-load.log: {e}"),
        }
    }
    let total = events.len() as u64;
    events
        .into_iter()
        .enumerate()
        .map(|(i, event)| LogEntry {
            sequence: i as u64 + 1,
            subject: subjects::for_event(SAMPLE_CLUSTER, &event).unwrap_or_default(),
            stored_ms: Some(event.at_ms),
            event: Ok(event),
            pending: total - i as u64 - 1,
            trace: None,
        })
        .collect()
}

/// A fingerprint of `state` as serde gives it, in a form that does not depend on any hash
/// map's iteration order (maps become JSON objects, whose keys `serde_json` keeps sorted): the
/// same on every machine and toolchain for the same state, whatever fields it gains (they are
/// serialized like the rest).
///
/// # Panics
/// If `state` does not serialize (a broken test).
pub fn state_fingerprint<S: serde::Serialize>(state: &S) -> u64 {
    // Written out, then read back as a value: objects come back with their keys sorted. (Not
    // `to_value`, which refuses integers past 64 bits; read back, such an integer is a float,
    // the same float every time.)
    let text = match serde_json::to_string(state) {
        Ok(t) => t,
        Err(e) => panic!("the state does not serialize: {e}"),
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => panic!("the state's JSON does not read back: {e}"),
    };
    fingerprint(value.to_string().as_bytes())
}

/// A stable 64-bit fingerprint of `bytes` (FNV-1a): the same on every machine and toolchain.
pub fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
