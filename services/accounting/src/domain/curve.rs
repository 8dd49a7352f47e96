//! A cumulative curve: the running integral of a step-function rate over time.
//!
//! Place in the flow: every quantity the accounting fold integrates is one of these. A job
//! start or stop changes its allocation's rate (GPUs running); a node joining or leaving changes
//! the cluster's capacity rate. The integral up to any `t` is then one binary search and one
//! multiplication, and usage inside `[now - W, now]` is `cum(now) - cum(now - W)`: intervals that
//! straddle the window edge count only their overlap and running work counts up to `now`, with
//! no per-interval bookkeeping and no rescan of history.
//!
//! Memory: one breakpoint per distinct time the rate changed. [`Curve::evict_through`] drops
//! breakpoints that can no longer matter, keeping the last one at or before the bound (it
//! anchors the integral at the window's start).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// One breakpoint: from `t` on, the rate is `rate`; the integral up to `t` is `cum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Point {
    t: i64,
    cum: u128,
    rate: u64,
}

/// The integral of a non-negative step rate (GPUs) over time (ms), in GPU-ms.
///
/// Times must be passed in non-decreasing order; the fold guarantees that by clamping event
/// times to each cluster's clock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Curve {
    points: VecDeque<Point>,
    /// A copy of the last breakpoint (meaningful only when `points` is not empty): every job
    /// start or stop reads it, and keeping it inline spares a cache miss into the deque.
    last: Point,
}

impl Default for Point {
    fn default() -> Point {
        Point {
            t: i64::MIN,
            cum: 0,
            rate: 0,
        }
    }
}

/// `rate x (to - from)` for `to >= from`, saturating (never reached by real clusters).
fn area(rate: u64, from: i64, to: i64) -> u128 {
    let span = u128::from(to.abs_diff(from));
    u128::from(rate).saturating_mul(span)
}

impl Curve {
    /// The rate in force after the last breakpoint (0 for an empty curve).
    pub fn rate(&self) -> u64 {
        if self.points.is_empty() {
            0
        } else {
            self.last.rate
        }
    }

    /// Sets the rate from `t` on. `t` earlier than the last breakpoint is taken as that
    /// breakpoint's time (callers never do this; it keeps the curve well-formed regardless).
    pub fn set_rate(&mut self, t: i64, rate: u64) {
        if self.points.is_empty() {
            if rate != 0 {
                self.last = Point { t, cum: 0, rate };
                self.points.push_back(self.last);
            }
            return;
        }
        let last = self.last;
        if t <= last.t {
            self.last.rate = rate;
            if let Some(back) = self.points.back_mut() {
                back.rate = rate;
            }
        } else if last.rate != rate {
            let cum = last.cum.saturating_add(area(last.rate, last.t, t));
            self.last = Point { t, cum, rate };
            self.points.push_back(self.last);
        }
    }

    /// Adds `delta` GPUs to the rate from `t` on.
    pub fn add(&mut self, t: i64, delta: u64) {
        self.set_rate(t, self.rate().saturating_add(delta));
    }

    /// Removes `delta` GPUs from the rate from `t` on (floored at 0).
    pub fn sub(&mut self, t: i64, delta: u64) {
        self.set_rate(t, self.rate().saturating_sub(delta));
    }

    /// The integral from the beginning of (retained) time up to `t`.
    ///
    /// Only differences of two values are meaningful, and only for times at or after the
    /// last eviction bound.
    pub fn cum_at(&self, t: i64) -> u128 {
        // At or after the last breakpoint (every `now` query): the inline copy answers.
        if !self.points.is_empty() && t >= self.last.t {
            return self
                .last
                .cum
                .saturating_add(area(self.last.rate, self.last.t, t));
        }
        // Index of the first breakpoint after `t`; the one before it is in force at `t`.
        let after = self.points.partition_point(|p| p.t <= t);
        match after.checked_sub(1).and_then(|i| self.points.get(i)) {
            Some(p) => p.cum.saturating_add(area(p.rate, p.t, t)),
            // Before the first breakpoint the rate was 0.
            None => self.points.front().map_or(0, |p| p.cum),
        }
    }

    /// The integral over `[from, to]` (0 when `to <= from`).
    pub fn between(&self, from: i64, to: i64) -> u128 {
        if to <= from {
            return 0;
        }
        self.cum_at(to).saturating_sub(self.cum_at(from))
    }

    /// Forgets everything that only matters before `bound`: afterwards `cum_at(t)` differences
    /// are unchanged for every `t >= bound`.
    pub fn evict_through(&mut self, bound: i64) {
        // The evicted points are a window old, hence cold in cache: scan them front to back
        // (a sequential read the prefetcher streams, unlike a bisection's scattered probes),
        // then drop them in one go, keeping the last one at or before `bound` as the anchor.
        let anchor = self
            .points
            .iter()
            .skip(1)
            .take_while(|p| p.t <= bound)
            .count();
        self.points.drain(..anchor);
        // A flat zero tail carries no information: free the allocation entirely.
        if self.points.len() == 1 && self.rate() == 0 {
            *self = Curve::default();
        }
    }

    /// Breakpoints retained (for memory reporting).
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether no breakpoint is retained.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn integral_of_steps() {
        let mut c = Curve::default();
        c.add(10, 2); // 2 GPUs from 10
        c.add(20, 3); // 5 GPUs from 20
        c.sub(30, 5); // 0 from 30
        assert_eq!(c.cum_at(0), 0);
        assert_eq!(c.cum_at(10), 0);
        assert_eq!(c.cum_at(15), 10);
        assert_eq!(c.cum_at(20), 20);
        assert_eq!(c.cum_at(30), 70);
        assert_eq!(c.cum_at(1_000), 70);
        assert_eq!(c.between(15, 25), 10 + 25);
        assert_eq!(c.between(25, 15), 0);
    }

    #[test]
    fn same_time_changes_share_one_breakpoint() {
        let mut c = Curve::default();
        c.add(10, 2);
        c.add(10, 2);
        c.sub(10, 1);
        assert_eq!(c.len(), 1);
        assert_eq!(c.between(10, 20), 30);
    }

    #[test]
    fn eviction_keeps_the_anchor_and_frees_flat_tails() {
        let mut c = Curve::default();
        c.add(0, 1);
        c.add(10, 1);
        c.add(20, 1);
        c.evict_through(15);
        assert_eq!(c.len(), 2);
        assert_eq!(c.between(15, 25), 10 + 15);
        c.sub(30, 3);
        c.evict_through(40);
        assert!(c.is_empty());
        assert_eq!(c.between(40, 50), 0);
    }

    proptest! {
        /// Against a per-millisecond sum of the rate, before and after eviction.
        #[test]
        fn matches_pointwise_sum(
            steps in proptest::collection::vec((0i64..20, 0u64..5), 0..20),
            bound in 0i64..200,
            a in 0i64..250,
            b in 0i64..250,
        ) {
            let mut c = Curve::default();
            let mut rate_at = vec![0u64; 260];
            let mut t = 0;
            for (dt, r) in steps {
                t += dt;
                c.set_rate(t, r);
                for slot in rate_at.iter_mut().skip(t as usize) {
                    *slot = r;
                }
            }
            let naive = |from: i64, to: i64| -> u128 {
                (from.max(0)..to).map(|ms| u128::from(rate_at[ms as usize])).sum()
            };
            prop_assert_eq!(c.between(a, b), naive(a, b));
            c.evict_through(bound);
            let (a, b) = (a.max(bound), b.max(bound));
            prop_assert_eq!(c.between(a, b), naive(a, b));
        }
    }
}
