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

/// A service's "now", held to the log's time: the host's wall clock, but never more than
/// [`MAX_AHEAD_OF_LOG_MS`] past the server's time as the newest live log entry gave it, carried
/// forward by a clock no one can step (monotonic), and never before the newest time the stream
/// stored an entry at.
///
/// Place in the flow: the preemption service decides at "now" whether a job is still inside
/// its minimum runtime, whether an order's grace is over and whether a maintenance window is
/// near. A host clock set
/// an hour ahead (a wrong NTP step, a restored VM) would end every protection an hour early and
/// kill every order at once; held to the log, it ends them at most a minute early, and the
/// preemption service holds its "now" to no later than the log's time
/// ([`LogClock::now_at_most_ahead`]), so its own clock ends none early (a launcher's clock
/// behind the server's still can, down to the job's placement). A host clock
/// set back would hold kills, and the window, in the past.
///
/// Only entries that arrived live count fully (delivered at the tail, after one that was too):
/// an entry read while catching up was stored long ago. At the end of the catch-up the service
/// reads the server's clock and anchors on it ([`LogClock::anchor`]); failing that, the newest
/// entry caught up may stand for the log's time then ([`LogClock::caught_up`]): at most the
/// real time, so a service restarted on a host clock that runs ahead does not pass at it, but
/// too low by however long the log was quiet before the restart, until the next live entry.
/// The bounds are the log's time give or take [`MAX_AHEAD_OF_LOG_MS`], and never before the
/// newest entry stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogClock {
    /// The latest server time a live entry implies, less the monotonic reading at its arrival
    /// (the highest of them: a later entry never lowers the bound).
    offset: Option<i64>,
    /// Whether the entry delivered last had nothing pending after it.
    at_tail: bool,
    /// The newest time the stream stored an entry at, of those observed.
    newest_stored: Option<i64>,
}

impl LogClock {
    /// Notes a log entry the stream stored at `stored_ms` (`None`: not from a stream),
    /// delivered with `pending` entries still to come, when the monotonic clock read
    /// `monotonic_ms`.
    pub fn observe(&mut self, stored_ms: Option<i64>, pending: u64, monotonic_ms: i64) {
        if let Some(stored) = stored_ms {
            self.newest_stored = Some(self.newest_stored.map_or(stored, |n| n.max(stored)));
        }
        if self.at_tail
            && pending == 0
            && let Some(stored) = stored_ms
        {
            let offset = stored.saturating_sub(monotonic_ms);
            self.offset = Some(self.offset.map_or(offset, |o| o.max(offset)));
        }
        self.at_tail = pending == 0;
    }

    /// Notes that the reader has reached the log's end (its catch-up is over) when the
    /// monotonic clock read `monotonic_ms`: the next entry delivered with nothing pending after
    /// it arrived live, and until then the newest entry observed stands for the log's time now.
    pub fn caught_up(&mut self, monotonic_ms: i64) {
        self.reached_tail();
        if let Some(stored) = self.newest_stored {
            let offset = stored.saturating_sub(monotonic_ms);
            self.offset = Some(self.offset.map_or(offset, |o| o.max(offset)));
        }
    }

    /// Notes that the reader has reached the log's end and that the log's time (the stream's
    /// server's clock) read `log_ms` at the monotonic reading `monotonic_ms`: better than
    /// [`LogClock::caught_up`]'s newest entry, which is as old as the log is quiet. Returns how
    /// far the log's time moved back (0 if it did not).
    ///
    /// The reading replaces what live entries implied, lower or higher: they only ever raise
    /// the log's time, so entries stored while the server's clock was stepped ahead would
    /// otherwise keep it ahead for the life of the process, after the server's clock was set
    /// right (the preemption service would end every protection early by as much). A service
    /// reads the server's time again every few minutes (`HeldClock`) for that. So too the
    /// newest time stored, which holds "now" up from below: an entry stored past the server's
    /// time as read was stored while its clock ran ahead.
    pub fn anchor(&mut self, log_ms: i64, monotonic_ms: i64) -> i64 {
        self.reached_tail();
        let before = self.log_now(monotonic_ms);
        self.offset = Some(log_ms.saturating_sub(monotonic_ms));
        // An entry stored after the server's time now was stored by its clock while it ran
        // ahead: "now" need not wait for real time to pass it.
        self.newest_stored = self.newest_stored.map(|n| n.min(log_ms));
        before.map_or(0, |b| b.saturating_sub(log_ms).max(0))
    }

    /// Notes that the reader has reached the log's end, without letting the newest entry
    /// observed stand for the log's time (as [`LogClock::caught_up`] does): for a reader that
    /// follows only some of the log's subjects, whose newest entry may be hours older than the
    /// log's end. The next entry delivered with nothing pending after it arrived live; until
    /// one has, only the newest entry stored bounds "now" (from below).
    pub fn reached_tail(&mut self) {
        self.at_tail = true;
    }

    /// The log's time now by the monotonic reading `monotonic_ms`, if a live entry gave it.
    pub fn log_now(&self, monotonic_ms: i64) -> Option<i64> {
        self.offset.map(|o| o.saturating_add(monotonic_ms))
    }

    /// "Now": `wall_ms`, held within [`MAX_AHEAD_OF_LOG_MS`] of the log's time either way,
    /// and never before the newest time stored.
    pub fn now(&self, wall_ms: i64, monotonic_ms: i64) -> i64 {
        self.now_at_most_ahead(wall_ms, monotonic_ms, MAX_AHEAD_OF_LOG_MS)
    }

    /// [`LogClock::now`], but never more than `ahead_ms` past the log's time (0: never past
    /// it), where a live entry gave it: for the preemption service, whose "now" ends
    /// protections, so a host clock a little ahead of the server's ends none early.
    pub fn now_at_most_ahead(&self, wall_ms: i64, monotonic_ms: i64, ahead_ms: i64) -> i64 {
        let held = match self.log_now(monotonic_ms) {
            Some(log) => wall_ms
                .min(log.saturating_add(ahead_ms.clamp(0, MAX_AHEAD_OF_LOG_MS)))
                .max(log.saturating_sub(MAX_AHEAD_OF_LOG_MS)),
            None => wall_ms,
        };
        self.newest_stored.map_or(held, |n| held.max(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anchor_gives_the_logs_time_however_old_its_newest_entry() {
        let server = 1_800_000_000_000;
        let mut c = LogClock::default();
        // The newest entry is a day old: caught up that way, the log's time would be a day
        // behind; anchored on the server's time read now, it is right.
        c.observe(Some(server - 86_400_000), 0, 100);
        c.anchor(server, 200);
        assert_eq!(c.log_now(200), Some(server));
        assert_eq!(
            c.now(server + 3_600_000, 1_200),
            server + 1_000 + MAX_AHEAD_OF_LOG_MS
        );
        assert_eq!(c.now(server + 500, 700), server + 500);
        // The next entry delivered with nothing pending counts as live.
        c.observe(Some(server + 10_000), 0, 300);
        assert_eq!(c.log_now(300), Some(server + 10_000));
    }

    #[test]
    fn an_anchor_sets_back_what_entries_stored_by_a_clock_stepped_ahead_implied() {
        let server = 1_800_000_000_000;
        let mut c = LogClock::default();
        c.anchor(server, 0);
        // The server's clock is stepped an hour ahead for a moment: an entry stored then.
        c.observe(Some(server + 3_600_000 + 1_000), 0, 1_000);
        assert_eq!(c.log_now(2_000), Some(server + 3_600_000 + 2_000));
        // Set right, the server's time read again: the log's time is its time, not an hour
        // ahead for good (and the hour it moved back is reported).
        assert_eq!(c.anchor(server + 5_000, 5_000), 3_600_000);
        assert_eq!(c.log_now(6_000), Some(server + 6_000));
        // A preemption service's "now" (never ahead of the log's time) follows at once: the
        // entry stored an hour ahead holds it up no longer.
        assert_eq!(
            c.now_at_most_ahead(server + 6_000, 6_000, 0),
            server + 6_000
        );
        let later = 3_700_000;
        // A reading ahead of the entries raises it, and reports no move back.
        assert_eq!(c.anchor(server + later + 500, later), 0);
        assert_eq!(c.log_now(later), Some(server + later + 500));
    }

    #[test]
    fn a_wall_clock_stepped_ahead_is_held_to_the_logs_time_plus_a_minute() {
        let stored = 1_800_000_000_000;
        let mut c = LogClock::default();
        // Catching up: old entries, then the tail (pending 0) reached: nothing live yet, and
        // until the catch-up is over nothing but the newest entry stored bounds "now".
        c.observe(Some(stored - 3_600_000), 2, 100);
        c.observe(Some(stored - 1_800_000), 1, 101);
        c.observe(Some(stored - 900_000), 0, 102);
        assert_eq!(c.log_now(102), None);
        assert_eq!(c.now(stored + 86_400_000, 102), stored + 86_400_000);
        assert_eq!(c.now(stored - 7_200_000, 102), stored - 900_000);
        // Caught up (a restart): the newest entry stands for the log's time then, so a host
        // clock a day ahead is held to it plus a minute, moving on with the monotonic clock.
        c.caught_up(200);
        assert_eq!(c.log_now(200), Some(stored - 900_000));
        assert_eq!(
            c.now(stored + 86_400_000, 10_200),
            stored - 900_000 + 10_000 + MAX_AHEAD_OF_LOG_MS
        );
        // A live entry: the log's time moves on with the monotonic clock.
        c.observe(Some(stored), 0, 1_000);
        assert_eq!(c.log_now(1_000), Some(stored));
        assert_eq!(c.log_now(61_000), Some(stored + 60_000));
        // The host clock stepped an hour ahead, no time passing: held to a minute ahead.
        assert_eq!(
            c.now(stored + 3_600_000, 1_000),
            stored + MAX_AHEAD_OF_LOG_MS
        );
        // A wall clock in step stands; one behind the log is held to its newest entry, and
        // while the log is quiet to a minute behind its time.
        assert_eq!(c.now(stored + 5_000, 6_000), stored + 5_000);
        assert_eq!(c.now(stored - 3_600_000, 1_000), stored);
        assert_eq!(
            c.now(stored - 3_600_000, 301_000),
            stored + 300_000 - MAX_AHEAD_OF_LOG_MS
        );
        // An entry caught up after a reconnection (stored earlier) lowers nothing.
        c.observe(Some(stored - 600_000), 0, 2_000);
        assert_eq!(c.log_now(2_000), Some(stored + 1_000));
        // Entries not from a stream, or in a burst, move nothing.
        c.observe(None, 0, 3_000);
        c.observe(Some(stored + 9_000_000), 5, 3_000);
        assert_eq!(c.log_now(3_000), Some(stored + 2_000));
        // Extremes saturate.
        c.observe(Some(i64::MAX), 0, 3_000);
        c.observe(Some(i64::MAX), 0, i64::MIN);
        assert_eq!(c.now(i64::MAX, i64::MAX), i64::MAX);
    }

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
