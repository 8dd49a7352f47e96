//! When the next cycle runs: pure bookkeeping over instants, so it is tested without a runtime.
//!
//! - A change to the state (a submission, an end, a node, a budget, a snapshot, ...) makes the
//!   state dirty. The cycle runs at once if the last one started at least `debounce` ago, and
//!   otherwise `debounce` after that start: at most one change-driven cycle per `debounce`,
//!   so the changes of a burst are decided together and a steady stream of them cannot
//!   postpone the cycle forever. After a cycle's end, at least as long as it took to decide
//!   passes before the next, so a service whose cycles grow costly (a queue of 100,000 jobs)
//!   spends at most about half its time deciding under a steady stream of changes.
//! - So a change after a quiet spell waits for nothing: a submission to an idle cluster is
//!   placed within one cycle (SPEC section 6: submit to placement p99 within 10 ms at 1,000
//!   submissions/s). Waiting `debounce` after the first change instead, as this did at first
//!   (with 20 ms), put most of it on every job's wait: `--bench placement_latency` at
//!   1,000/s gave p50 16.4 ms and p99 32 ms from submit to placement, where this rule with
//!   2 ms gives p50 3.4-4.1 ms and p99 8.7-13.4 ms (eight runs on a busy 2-core machine).
//!   Counting the debounce from the cycle's end rather than its start gave p99 14-15 ms: the
//!   placements' round trip was waited on top of it.
//! - Independently, a cycle runs `every` after the previous one even if nothing changed: time
//!   alone matters (minimum runtimes end, reservations come due, maintenance windows open).
//! - The barrier: no cycle runs until the fold has applied the highest sequence acknowledged
//!   for the previous cycle's placements. Without it the next cycle would see those GPUs as
//!   free and give them to other jobs (over-commit), or place the same job again.

use std::time::Duration;

use tokio::time::Instant;

/// The pacing of one service's cycles.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    debounce: Duration,
    every: Duration,
    /// When the change-driven cycle is due, if the state changed since the last cycle.
    dirty_due: Option<Instant>,
    /// The earliest time for a change-driven cycle: `debounce` after the last one started,
    /// and no sooner after its end than it took to decide (`None` before the first cycle).
    next_earliest: Option<Instant>,
    /// When the timer cycle is due.
    tick_due: Instant,
    /// The fold must have applied this sequence before the next cycle.
    barrier: u64,
    /// Placements must be settled before the next cycle; retry at this time.
    blocked_until: Option<Instant>,
}

impl Pacer {
    /// Pacing that runs a first cycle at once (after catch-up).
    pub fn new(now: Instant, debounce: Duration, every: Duration) -> Self {
        Self {
            debounce,
            every,
            dirty_due: Some(now),
            next_earliest: None,
            tick_due: now + every,
            barrier: 0,
            blocked_until: None,
        }
    }

    /// The state changed at `now`.
    pub fn changed(&mut self, now: Instant) {
        if self.dirty_due.is_none() {
            self.dirty_due = Some(self.next_earliest.map_or(now, |t| now.max(t)));
        }
    }

    /// When the next cycle may run, given the fold's last applied sequence; `None` while the
    /// fold is behind the barrier (a new entry re-asks).
    pub fn due(&self, applied: u64) -> Option<Instant> {
        if let Some(t) = self.blocked_until {
            return Some(t);
        }
        if applied < self.barrier {
            return None;
        }
        Some(match self.dirty_due {
            Some(d) => d.min(self.tick_due),
            None => self.tick_due,
        })
    }

    /// The fold's last applied sequence is behind the barrier.
    pub fn behind(&self, applied: u64) -> bool {
        applied < self.barrier
    }

    /// A cycle that started at `started` and took `deciding` to decide (then published)
    /// ended at `now`; the fold must reach `barrier` before the next one.
    pub fn ran(&mut self, started: Instant, now: Instant, barrier: u64, deciding: Duration) {
        self.dirty_due = None;
        self.next_earliest = Some((started + self.debounce).max(now + deciding));
        self.tick_due = now + self.every;
        self.barrier = self.barrier.max(barrier);
        self.blocked_until = None;
    }

    /// Raises the barrier (an outcome learnt after the cycle).
    pub fn raise_barrier(&mut self, barrier: u64) {
        self.barrier = self.barrier.max(barrier);
    }

    /// No cycle may run before something is resolved; try again at `retry`.
    pub fn block(&mut self, retry: Instant) {
        self.blocked_until = Some(retry);
    }

    /// Lifts [`Pacer::block`].
    pub fn unblock(&mut self) {
        self.blocked_until = None;
    }

    /// Whether a cycle is blocked on settling placements.
    pub fn blocked(&self) -> bool {
        self.blocked_until.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn changes_soon_after_a_cycle_wait_out_the_debounce_together() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 20 * MS, 5_000 * MS);
        assert_eq!(p.due(0), Some(t0));
        p.ran(t0, t0, 0, Duration::ZERO);
        assert_eq!(p.due(0), Some(t0 + 5_000 * MS), "only the timer is due");
        p.changed(t0 + 3 * MS);
        p.changed(t0 + 10 * MS);
        p.changed(t0 + 19 * MS);
        assert_eq!(
            p.due(0),
            Some(t0 + 20 * MS),
            "one cycle, a debounce after the last, and later changes do not postpone it"
        );
    }

    #[test]
    fn a_change_after_a_quiet_spell_is_decided_at_once() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 20 * MS, 5_000 * MS);
        p.ran(t0, t0, 0, Duration::ZERO);
        p.changed(t0 + 500 * MS);
        assert_eq!(p.due(0), Some(t0 + 500 * MS), "no wait after a quiet spell");
        p.ran(t0 + 500 * MS, t0 + 500 * MS, 0, Duration::ZERO);
        p.changed(t0 + 520 * MS);
        assert_eq!(p.due(0), Some(t0 + 520 * MS), "exactly a debounce later");
        p.ran(t0 + 520 * MS, t0 + 520 * MS, 0, Duration::ZERO);
        p.changed(t0 + 521 * MS);
        assert_eq!(p.due(0), Some(t0 + 540 * MS));
    }

    #[test]
    fn the_debounce_counts_from_a_cycle_start_so_publishing_is_not_waited_twice() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 2 * MS, 5_000 * MS);
        // Decided in 0.1 ms, then 1.5 ms to have its placements acknowledged.
        p.ran(t0, t0 + 16 * MS / 10, 7, MS / 10);
        p.changed(t0 + MS);
        assert_eq!(p.due(7), Some(t0 + 2 * MS));
    }

    #[test]
    fn a_costly_cycle_widens_the_gap_to_its_own_length() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 2 * MS, 5_000 * MS);
        p.ran(t0, t0 + 30 * MS, 0, 30 * MS);
        p.changed(t0 + 31 * MS);
        assert_eq!(p.due(0), Some(t0 + 60 * MS), "as long as it took to decide");
        p.ran(t0 + 61 * MS, t0 + 61 * MS, 0, MS);
        p.changed(t0 + 61 * MS);
        assert_eq!(p.due(0), Some(t0 + 63 * MS), "a cheap one: the debounce");
    }

    #[test]
    fn barrier_holds_the_next_cycle_until_the_fold_reaches_it() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 20 * MS, 5_000 * MS);
        p.ran(t0, t0, 120, Duration::ZERO);
        p.changed(t0);
        assert_eq!(p.due(119), None);
        assert!(p.behind(119));
        assert_eq!(p.due(120), Some(t0 + 20 * MS));
        // A later cycle that published nothing never lowers it.
        p.ran(t0, t0, 0, Duration::ZERO);
        assert_eq!(p.due(119), None);
        p.raise_barrier(200);
        assert_eq!(p.due(150), None);
        assert!(p.due(200).is_some());
    }

    #[test]
    fn a_block_wins_over_everything_until_lifted_or_a_cycle_runs() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 20 * MS, 5_000 * MS);
        p.ran(t0, t0, 50, Duration::ZERO);
        p.block(t0 + 1_000 * MS);
        assert!(p.blocked());
        assert_eq!(p.due(0), Some(t0 + 1_000 * MS));
        p.unblock();
        assert_eq!(p.due(0), None);
        assert_eq!(p.due(50), Some(t0 + 5_000 * MS));
    }
}
