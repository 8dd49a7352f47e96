//! How long a service waits before it tries again after writes of unknown outcome.
//!
//! Place in the flow: the decision service after a cycle whose placements were not
//! acknowledged, and the preemption service after a pass whose effects were not, settle what
//! became of them and decide again; a server that refuses every write (a full disk, a lost
//! quorum) must not be asked again and again without pause.

use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;

/// Whether a publish that failed this way may still be stored, or be in flight: a timeout, a
/// broken connection, a server busy with the same message id. The other failures are answers:
/// the message is not stored.
pub fn outcome_unknown(kind: PublishErrorKind) -> bool {
    matches!(
        kind,
        PublishErrorKind::TimedOut
            | PublishErrorKind::BrokenPipe
            | PublishErrorKind::MaxAckPending
            | PublishErrorKind::Other
    )
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
