//! The clock services read "now" from; domain code receives the value, never the clock.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of the current time in Unix epoch milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Milliseconds on a clock that only moves forward at the pace of real time, from an
    /// arbitrary origin: unlike [`Clock::now_ms`], no one setting the host's clock steps it.
    /// What it measures is elapsed time (see [`fairshare_model::logtime::LogClock`]). By
    /// default the wall clock itself.
    fn monotonic_ms(&self) -> i64 {
        self.now_ms()
    }
}

/// The machine's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            // A clock set before 1970 is a broken host; report the epoch rather than panic.
            .unwrap_or(0)
    }

    fn monotonic_ms(&self) -> i64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let elapsed = ORIGIN.get_or_init(Instant::now).elapsed().as_millis();
        i64::try_from(elapsed).unwrap_or(i64::MAX)
    }
}

/// A clock tests move by hand; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    /// The wall clock's reading.
    now: Arc<AtomicI64>,
    /// How far the wall clock was stepped ([`ManualClock::step`]) without time passing: the
    /// monotonic reading is the wall's less this.
    stepped: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(now_ms)),
            stepped: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Steps the wall clock by `ms` (negative: back) without time passing, as someone setting
    /// the host's clock does: [`Clock::monotonic_ms`] does not move.
    pub fn step(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
        self.stepped.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the time, as time passing would (the monotonic reading moves with it; a test that
    /// sets it back has the monotonic clock go back too, which no real one does: use
    /// [`ManualClock::step`] for a host's clock being set).
    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }

    fn monotonic_ms(&self) -> i64 {
        self.now_ms()
            .saturating_sub(self.stepped.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_is_shared_between_clones() {
        let a = ManualClock::new(10);
        let b = a.clone();
        a.advance(5);
        assert_eq!(b.now_ms(), 15);
        b.set(100);
        assert_eq!(a.now_ms(), 100);
    }

    #[test]
    fn a_step_moves_the_wall_clock_only() {
        let c = ManualClock::new(1_000);
        c.advance(500);
        assert_eq!((c.now_ms(), c.monotonic_ms()), (1_500, 1_500));
        c.step(3_600_000);
        assert_eq!((c.now_ms(), c.monotonic_ms()), (3_601_500, 1_500));
        c.advance(10);
        assert_eq!((c.now_ms(), c.monotonic_ms()), (3_601_510, 1_510));
    }

    #[test]
    fn the_system_clocks_monotonic_reading_moves_forward() {
        let a = SystemClock.monotonic_ms();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(SystemClock.monotonic_ms() >= a + 5);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
