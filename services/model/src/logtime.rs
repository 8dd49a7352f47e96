//! When a logged event takes effect: its writer's time, but never far past the moment the stream
//! stored it.
//!
//! Place in the flow: every event carries `at_ms` from its writer's clock (a launcher's
//! `JobStarted`, a service's `JobPlaced`), and JetStream stamps each entry with the server's
//! own time as it stores it. The folds that keep time (accounting's usage, the decision and
//! preemption services' protections, meters and grace deadlines) take the earlier of the two
//! plus a margin ([`effective_at`]), so a writer whose clock runs ahead cannot stretch a job's
//! protection, or move a cluster's clock, past what the server saw. The stored time is part of
//! the log, so a fold from scratch, a restored checkpoint and an audit clamp alike. The
//! simulator's log has no stored times: its events take effect at their own time.

/// How far after the stream stored an entry its event may take effect: writers' clocks may run
/// ahead of the server's by this much without their events being moved.
pub const MAX_AHEAD_OF_LOG_MS: i64 = 60_000;

/// The time an event stamped `at_ms` takes effect when the stream stored it at `stored_ms`
/// (`None`: a log without stored times, the event's own time).
pub fn effective_at(at_ms: i64, stored_ms: Option<i64>) -> i64 {
    match stored_ms {
        Some(stored) => at_ms.min(stored.saturating_add(MAX_AHEAD_OF_LOG_MS)),
        None => at_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_takes_effect_at_most_a_minute_after_it_was_stored() {
        let stored = 1_800_000_000_000;
        assert_eq!(effective_at(stored - 5, Some(stored)), stored - 5);
        assert_eq!(
            effective_at(stored + MAX_AHEAD_OF_LOG_MS, Some(stored)),
            stored + MAX_AHEAD_OF_LOG_MS
        );
        assert_eq!(
            effective_at(stored + 86_400_000, Some(stored)),
            stored + MAX_AHEAD_OF_LOG_MS
        );
        assert_eq!(
            effective_at(i64::MAX, Some(stored)),
            stored + MAX_AHEAD_OF_LOG_MS
        );
        assert_eq!(effective_at(i64::MAX, Some(i64::MAX)), i64::MAX);
        assert_eq!(effective_at(stored + 86_400_000, None), stored + 86_400_000);
    }
}
