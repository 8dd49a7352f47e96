//! A service's "now", held to the log's time: the host's clock, read through
//! [`fairshare_model::logtime::LogClock`].
//!
//! Place in the flow: the services that act on time (preemption ends protections and graces at
//! "now"; accounting ends its usage windows and paces its snapshots by it) note every log entry
//! they follow here and read "now" from here rather than from their [`Clock`]. A host clock set
//! an hour ahead or behind then moves them at most a minute off the NATS server's time (the
//! preemption service's never ahead of it: [`HeldClock::never_ahead`]), and the first time it
//! does, the service says so once in its log. At start, once caught up, they read
//! the server's own time ([`server_time_ms`]) for the log's time, however long the log was
//! quiet, and read it again every few minutes ([`HeldClock::refresh_anchor`]): live entries
//! only ever raise the log's time, so without a new reading a server clock stepped ahead for a
//! moment would keep "now" ahead after it was set right.

use std::sync::Arc;

use async_nats::jetstream;
use async_nats::jetstream::response::Response;
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_model::logtime::LogClock;
use serde::Deserialize;

use crate::clock::Clock;
use crate::log::LogEntry;

/// Why the server's time could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ServerTimeError {
    /// The request for the events stream's info failed.
    #[error("cannot ask for {EVENTS_STREAM}'s info: {0}")]
    Request(String),
    /// The answer carries no time (a nats-server older than 2.10).
    #[error("the server's answer carries no time")]
    Missing,
    /// The time is not RFC 3339.
    #[error("the server's time {0:?} is not RFC 3339")]
    Unreadable(String),
}

/// The part of a JetStream stream-info answer read here: the server's clock when it answered.
#[derive(Deserialize)]
struct Stamped {
    /// RFC 3339, with nanoseconds.
    ts: Option<String>,
}

/// The NATS server's clock now (Unix ms), as it stamps its answer to a stream-info request:
/// the stream leader's clock, which stamps the entries' stored times, so the log's time.
pub async fn server_time_ms(js: &jetstream::Context) -> Result<i64, ServerTimeError> {
    let answer: Response<Stamped> = js
        .request(format!("STREAM.INFO.{EVENTS_STREAM}"), &())
        .await
        .map_err(|e| ServerTimeError::Request(e.to_string()))?;
    let stamped = match answer {
        Response::Ok(stamped) => stamped,
        Response::Err { error } => return Err(ServerTimeError::Request(error.to_string())),
    };
    let ts = stamped.ts.ok_or(ServerTimeError::Missing)?;
    let at = time::OffsetDateTime::parse(&ts, &time::format_description::well_known::Rfc3339)
        .map_err(|_| ServerTimeError::Unreadable(ts.clone()))?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000)
        .map_err(|_| ServerTimeError::Unreadable(ts))
}

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
    /// The monotonic reading of the last read of the server's time ([`LogClock::anchor`]),
    /// if one succeeded: [`HeldClock::refresh_anchor`] reads it again [`REANCHOR_MS`] later.
    anchored_at: Option<i64>,
    /// The monotonic reading of the last failed read of the server's time, if any
    /// ([`HeldClock::refresh_anchor`] waits [`ANCHOR_RETRY_MS`] after it).
    anchor_failed_at: Option<i64>,
    /// How far past the log's time "now" may run ([`HeldClock::never_ahead`]).
    ahead_ms: i64,
}

/// Which read of the server's time this is, for what a failure says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// At the end of the catch-up.
    Start,
    /// After the start's read failed, until one succeeds.
    Retry,
    /// The periodic read once one succeeded.
    Refresh,
}

/// How long after a failed read of the server's time the next is tried.
const ANCHOR_RETRY_MS: i64 = 30_000;

/// How long after a read of the server's time it is read again: how long a server clock
/// stepped ahead and set right can keep "now" ahead (one small request each time).
const REANCHOR_MS: i64 = 120_000;

impl HeldClock {
    /// Reads `clock`, held to the log's time once entries are noted; `spares` says, for the
    /// warning, what holding it spares the service's users.
    pub fn new(clock: Arc<dyn Clock>, spares: &'static str) -> Self {
        HeldClock {
            clock,
            log: LogClock::default(),
            held: false,
            spares,
            anchored_at: None,
            anchor_failed_at: None,
            ahead_ms: fairshare_model::logtime::MAX_AHEAD_OF_LOG_MS,
        }
    }

    /// This clock, never past the log's time where a live entry gave it (a host clock behind
    /// the server's is still held no more than a minute behind). For the preemption service:
    /// a job's start and an order's grace count from the server's time, so a host clock even
    /// seconds ahead of it would end protections, and graces, that much early.
    pub fn never_ahead(mut self) -> Self {
        self.ahead_ms = 0;
        self
    }

    /// Notes a log entry as it is delivered (catching up or live).
    pub fn observe(&mut self, entry: &LogEntry) {
        let monotonic = self.clock.monotonic_ms();
        self.log.observe(entry.stored_ms, entry.pending, monotonic);
    }

    /// Notes that the catch-up is over: the newest entry noted stands for the log's time until
    /// a live one arrives ([`LogClock::caught_up`]).
    fn caught_up(&mut self) {
        let monotonic = self.clock.monotonic_ms();
        self.log.caught_up(monotonic);
    }

    /// Notes that the catch-up is over, the server's clock (the log's time) reading `server_ms`
    /// now ([`server_time_ms`]).
    fn anchor(&mut self, server_ms: i64) {
        let monotonic = self.clock.monotonic_ms();
        let moved_back = self.log.anchor(server_ms, monotonic);
        self.anchored_at = Some(monotonic);
        if moved_back >= WARN_OFF_MS {
            tracing::warn!(
                moved_back_ms = moved_back,
                "the server's time is behind what its entries implied (its clock was ahead, \
                 and was set back): \"now\" is held to its time as read"
            );
        }
    }

    /// Whether [`HeldClock::refresh_anchor`] should read the server's time now: never read,
    /// or [`REANCHOR_MS`] since the last read, and not within [`ANCHOR_RETRY_MS`] of a read
    /// that failed.
    fn anchor_due(&self) -> bool {
        let now = self.clock.monotonic_ms();
        let since = |at: Option<i64>| at.map(|at| now.saturating_sub(at));
        if since(self.anchor_failed_at).is_some_and(|ms| ms < ANCHOR_RETRY_MS) {
            return false;
        }
        since(self.anchored_at).is_none_or(|ms| ms >= REANCHOR_MS)
    }

    /// Reads the server's time from `js` and anchors on it; on failure, leaves the clock as
    /// it was. Only the read at start warns of a failure: later ones would repeat it every
    /// 30 s while the server is away.
    async fn try_anchor(&mut self, js: &jetstream::Context, attempt: Attempt) -> bool {
        match server_time_ms(js).await {
            Ok(server_ms) => {
                self.anchor(server_ms);
                if attempt == Attempt::Retry {
                    tracing::info!("the server's time read: \"now\" is held to it");
                }
                true
            }
            Err(e) => {
                self.anchor_failed_at = Some(self.clock.monotonic_ms());
                match attempt {
                    Attempt::Start => {
                        tracing::warn!("cannot read the server's time at start: {e}");
                    }
                    Attempt::Retry | Attempt::Refresh => {
                        tracing::debug!("cannot read the server's time: {e}");
                    }
                }
                false
            }
        }
    }

    /// Reads the server's time again when it is due: every [`REANCHOR_MS`] once read (it
    /// may set the log's time back: [`LogClock::anchor`]), and after a failed read at most
    /// every [`ANCHOR_RETRY_MS`]. Services call it before they decide, and on their timers.
    pub async fn refresh_anchor(&mut self, js: &jetstream::Context) {
        if self.anchor_due() {
            let attempt = if self.anchored_at.is_none() {
                Attempt::Retry
            } else {
                Attempt::Refresh
            };
            self.try_anchor(js, attempt).await;
        }
    }

    /// Notes that the catch-up is over: anchored on the server's time read from `js`, or, if
    /// it cannot be read, on the newest entry noted when `newest_entry_stands` (a service whose
    /// newest entry is recent: the preemption service follows its cluster's usage snapshots,
    /// published every minute at the latest), else on nothing until an entry arrives live
    /// ([`LogClock::reached_tail`]; the caller should [try again](HeldClock::refresh_anchor)).
    pub async fn caught_up_with(&mut self, js: &jetstream::Context, newest_entry_stands: bool) {
        if self.try_anchor(js, Attempt::Start).await {
            return;
        }
        if newest_entry_stands {
            tracing::warn!("the newest entry stands for the log's time until one arrives live");
            self.caught_up();
        } else {
            tracing::warn!(
                "\"now\" is held to the log's time only from below until an entry arrives live \
                 or the server's time is read"
            );
            self.reached_tail();
        }
    }

    /// Notes that the catch-up is over without letting the newest entry noted stand for the
    /// log's time ([`LogClock::reached_tail`]): for a service that follows only some subjects.
    fn reached_tail(&mut self) {
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
        let now = self
            .log
            .now_at_most_ahead(wall, self.clock.monotonic_ms(), self.ahead_ms);
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

    /// A server clock stepped an hour ahead for a moment and set right: an entry stored then
    /// raised the log's time, and the preemption service's "now" with it (never ahead of the
    /// log's time, but never more than a minute behind it either); the next reading of the
    /// server's time, due two minutes after the last, sets it back.
    #[test]
    fn the_servers_time_read_again_undoes_a_step_ahead_of_its_clock() {
        let server = 1_800_000_000_000;
        let host = ManualClock::new(server);
        let mut now = HeldClock::new(Arc::new(host.clone()), "nothing").never_ahead();
        now.anchor(server);
        assert!(!now.anchor_due());
        host.advance(1_000);
        now.observe(&entry(server + 3_600_000 + 1_000, 0));
        host.advance(1_000);
        assert_eq!(now.now_ms(), server + 3_600_000 + 1_000);
        assert!(now.held, "an hour ahead of the host");
        host.advance(REANCHOR_MS - 3_000);
        assert!(!now.anchor_due(), "read again only every two minutes");
        host.advance(1_000);
        assert!(now.anchor_due());
        let read_at = server + REANCHOR_MS;
        now.anchor(read_at);
        assert!(!now.anchor_due());
        // The host's clock again: the entry stored an hour ahead no longer holds it up.
        assert_eq!(now.now_ms(), read_at);
        assert!(!now.held);
        host.advance(3_600_000);
        assert_eq!(now.now_ms(), read_at + 3_600_000);
        // A failed read is tried again after 30 s, not two minutes.
        host.advance(REANCHOR_MS);
        now.anchor_failed_at = Some(host.monotonic_ms());
        host.advance(ANCHOR_RETRY_MS - 1);
        assert!(!now.anchor_due());
        host.advance(1);
        assert!(now.anchor_due());
    }

    /// The preemption service's clock: a host clock 40 s ahead of the server's decides at the
    /// server's time (at its own, a protection ending within those 40 s would be cut).
    #[test]
    fn a_clock_that_is_never_ahead_decides_at_the_logs_time() {
        let server = 1_800_000_000_000;
        let host = ManualClock::new(server);
        let mut now = HeldClock::new(Arc::new(host.clone()), "nothing").never_ahead();
        now.observe(&entry(server - 5_000, 0));
        now.caught_up();
        now.observe(&entry(server, 0));
        host.step(40_000);
        assert_eq!(now.now_ms(), server);
        host.advance(5_000);
        assert_eq!(now.now_ms(), server + 5_000, "moving with the log's time");
    }
}
