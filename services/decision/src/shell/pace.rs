//! When the next cycle runs: pure bookkeeping over instants, so it is tested without a runtime.
//!
//! - A change to the state (a submission, an end, a node, a budget, a snapshot, ...) makes the
//!   state dirty; the cycle runs `debounce` after the *first* change since the last cycle, so a
//!   burst of events is decided together and a steady stream of them cannot postpone the cycle
//!   forever (at most one change-driven cycle per `debounce`).
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
    /// When the timer cycle is due.
    tick_due: Instant,
    /// The fold must have applied this sequence before the next cycle.
    barrier: u64,
    /// Something must be looked up before the next cycle; retry at this time.
    blocked_until: Option<Instant>,
}

impl Pacer {
    /// Pacing that runs a first cycle at once (after catch-up).
    pub fn new(now: Instant, debounce: Duration, every: Duration) -> Self {
        Self {
            debounce,
            every,
            dirty_due: Some(now),
            tick_due: now + every,
            barrier: 0,
            blocked_until: None,
        }
    }

    /// The state changed at `now`.
    pub fn changed(&mut self, now: Instant) {
        if self.dirty_due.is_none() {
            self.dirty_due = Some(now + self.debounce);
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

    /// A cycle ran at `now`; the fold must reach `barrier` before the next one.
    pub fn ran(&mut self, now: Instant, barrier: u64) {
        self.dirty_due = None;
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

    /// Whether a cycle is blocked on a lookup.
    pub fn blocked(&self) -> bool {
        self.blocked_until.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn first_cycle_is_immediate_then_changes_are_debounced_from_the_first() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 20 * MS, 5_000 * MS);
        assert_eq!(p.due(0), Some(t0));
        p.ran(t0, 0);
        assert_eq!(p.due(0), Some(t0 + 5_000 * MS), "only the timer is due");
        p.changed(t0 + 3 * MS);
        p.changed(t0 + 10 * MS);
        p.changed(t0 + 19 * MS);
        assert_eq!(
            p.due(0),
            Some(t0 + 23 * MS),
            "later changes do not postpone"
        );
    }

    #[test]
    fn barrier_holds_the_next_cycle_until_the_fold_reaches_it() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 20 * MS, 5_000 * MS);
        p.ran(t0, 120);
        p.changed(t0);
        assert_eq!(p.due(119), None);
        assert!(p.behind(119));
        assert_eq!(p.due(120), Some(t0 + 20 * MS));
        // A later cycle that published nothing never lowers it.
        p.ran(t0, 0);
        assert_eq!(p.due(119), None);
        p.raise_barrier(200);
        assert_eq!(p.due(150), None);
        assert!(p.due(200).is_some());
    }

    #[test]
    fn a_block_wins_over_everything_until_lifted_or_a_cycle_runs() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 20 * MS, 5_000 * MS);
        p.ran(t0, 50);
        p.block(t0 + 1_000 * MS);
        assert!(p.blocked());
        assert_eq!(p.due(0), Some(t0 + 1_000 * MS));
        p.unblock();
        assert_eq!(p.due(0), None);
        assert_eq!(p.due(50), Some(t0 + 5_000 * MS));
    }
}
