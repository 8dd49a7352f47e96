//! A service's "now", held to the log's time: the host's clock, read through
//! [`fairshare_model::logtime::LogClock`].
//!
//! Place in the flow: the services that act on time (preemption ends protections and graces at
//! "now"; accounting ends its usage windows and paces its snapshots by it) note every log entry
//! they follow here and read "now" from here rather than from their [`Clock`]. A host clock set
//! an hour ahead or behind then moves them at most a minute off the NATS server's time, and the
//! first time it does, the service says so once in its log.

use std::sync::Arc;

use fairshare_model::logtime::LogClock;

use crate::clock::Clock;
use crate::log::LogEntry;

/// How far the host's clock may be from the "now" served before a warning is given: hosts'
/// clocks differ by milliseconds to seconds all the time (an entry stored a moment "after"
/// this host read its clock).
const WARN_OFF_MS: i64 = 10_000;

/// The host's clock held to the log's time, with a warning per episode of the two parting.
pub struct HeldClock {
    /// The host's clock.
    clock: Arc<dyn Clock>,
    /// The log's time, from the entries noted.
    log: LogClock,
    /// Whether the last "now" was held [`WARN_OFF_MS`] or more off the host's clock (the
    /// warning is given once per episode).
    held: bool,
    /// What holding "now" to the log spares, for the warning ("no minimum runtime is cut
    /// short", say).
    spares: &'static str,
}

impl HeldClock {
    /// Reads `clock`, held to the log's time once entries are noted; `spares` says, for the
    /// warning, what holding it spares the service's users.
    pub fn new(clock: Arc<dyn Clock>, spares: &'static str) -> Self {
        HeldClock {
            clock,
            log: LogClock::default(),
            held: false,
            spares,
        }
    }

    /// Notes a log entry as it is delivered (catching up or live).
    pub fn observe(&mut self, entry: &LogEntry) {
        let monotonic = self.clock.monotonic_ms();
        self.log.observe(entry.stored_ms, entry.pending, monotonic);
    }

    /// Notes that the catch-up is over: the newest entry noted stands for the log's time until
    /// a live one arrives ([`LogClock::caught_up`]).
    pub fn caught_up(&mut self) {
        let monotonic = self.clock.monotonic_ms();
        self.log.caught_up(monotonic);
    }

    /// Notes that the catch-up is over without letting the newest entry noted stand for the
    /// log's time ([`LogClock::reached_tail`]): for a service that follows only some subjects.
    pub fn reached_tail(&mut self) {
        self.log.reached_tail();
    }

    /// The monotonic reading now ([`Clock::monotonic_ms`]): for measuring how long since
    /// something, which no one setting the host's clock can stretch or cut.
    pub fn monotonic_ms(&self) -> i64 {
        self.clock.monotonic_ms()
    }

    /// "Now": the host's clock, held within a minute of the log's time and never before its
    /// newest entry; the first reading held ten seconds or more off the host's clock gives a
    /// warning, and the first back in step says so.
    pub fn now_ms(&mut self) -> i64 {
        let wall = self.clock.now_ms();
        let now = self.log.now(wall, self.clock.monotonic_ms());
        let held = now.abs_diff(wall) >= WARN_OFF_MS.unsigned_abs();
        if held && !self.held {
            tracing::warn!(
                host_clock_ms = wall,
                now_ms = now,
                "this host's clock is off the log's (the NATS server's) time: more than a \
                 minute ahead of it, or behind its newest entry; working at the log's time, so \
                 {}; set the host's clock right (NTP)",
                self.spares
            );
        } else if !held && self.held {
            tracing::info!("this host's clock agrees with the log's time again");
        }
        self.held = held;
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn entry(stored_ms: i64, pending: u64) -> LogEntry {
        LogEntry {
            sequence: 1,
            subject: "fairshare.events.c.policy".into(),
            event: Ok(Default::default()),
            pending,
            trace: None,
            stored_ms: Some(stored_ms),
        }
    }

    #[test]
    fn a_host_clock_stepped_either_way_is_held_within_a_minute_of_the_log() {
        let server = 1_800_000_000_000;
        let host = ManualClock::new(server);
        let mut now = HeldClock::new(Arc::new(host.clone()), "nothing");
        now.observe(&entry(server - 5_000, 0));
        now.caught_up();
        now.observe(&entry(server, 0));
        assert_eq!(now.now_ms(), server);
        assert!(!now.held);
        host.step(3_600_000);
        assert_eq!(now.now_ms(), server + 60_000);
        assert!(now.held, "an hour ahead is worth a warning");
        // Time passes: the held "now" moves with it, not with the stepped wall.
        host.advance(30_000);
        assert_eq!(now.now_ms(), server + 90_000);
        // An hour behind: a minute behind the log's time, but never before its newest entry.
        host.step(-2 * 3_600_000);
        assert_eq!(now.now_ms(), server);
        now.observe(&entry(server - 40_000, 0));
        assert_eq!(now.now_ms(), server);
        host.step(3_600_000);
        assert_eq!(now.now_ms(), server + 30_000);
        assert!(!now.held, "back in step");
        assert_eq!(now.monotonic_ms(), server + 30_000);
    }
}
