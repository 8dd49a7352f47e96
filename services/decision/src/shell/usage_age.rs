//! Whether the usage snapshots the ranking starts from still arrive.
//!
//! Place in the flow: beside each decision cycle and preemption pass. Both rank allocations by
//! the accounting service's last `UsageSnapshot` plus the work in flight since its window end
//! ([`crate::domain::rank::leaf_usage`]). The accounting service publishes one at least every
//! minute, events or not; while none comes (the service down, far behind, or set to another
//! `--window`, whose snapshots are refused) the ranking keeps a window that no longer slides,
//! charging what ran since its end from its own record of the runs. The services go on
//! deciding, as they should, but an operator must hear of it: a warning once per spell, and a
//! line when snapshots come again.

use crate::domain::DecisionState;

/// How old the last snapshot's window end may be before it is reported: five of the
/// accounting service's longest gaps between snapshots (60 s), which leaves room for four
/// minutes of clock skew between its host and this one (a quiet cluster's window ends at the
/// accounting host's time).
pub const STALE_AFTER_MS: i64 = 5 * 60_000;

/// What a look at the snapshot's age found worth saying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgeNews {
    /// Nothing new.
    Quiet,
    /// The snapshot became stale: its window ended this long ago (ms).
    Stale(i64),
    /// A fresh snapshot came after a stale spell that lasted this long by this service's
    /// clock (ms).
    Fresh(i64),
}

/// The last snapshot's age as the cycles and passes see it.
#[derive(Debug, Default)]
pub struct UsageAge {
    /// When (this service's "now") the current stale spell was first seen.
    stale_since_ms: Option<i64>,
}

impl UsageAge {
    /// Looks at the state's snapshot at `now_ms` and says what changed. A stale snapshot is
    /// news only while work waits or runs (an idle cluster ranks nothing) and once a snapshot
    /// was taken (before the first, every run is charged from its start); a fresh one ends a
    /// stale spell whatever the cluster is doing.
    pub fn look(&mut self, state: &DecisionState, now_ms: i64) -> AgeNews {
        let Some(age) = state
            .usage()
            .map(|u| now_ms.saturating_sub(u.window_end_ms))
        else {
            return AgeNews::Quiet;
        };
        let busy = state.queued_len() > 0 || state.in_flight().next().is_some();
        match (self.stale_since_ms, age > STALE_AFTER_MS) {
            (None, true) if busy => {
                self.stale_since_ms = Some(now_ms);
                AgeNews::Stale(age)
            }
            (Some(since), false) => {
                self.stale_since_ms = None;
                AgeNews::Fresh(now_ms.saturating_sub(since))
            }
            _ => AgeNews::Quiet,
        }
    }

    /// [`Self::look`], logging the news for `service`.
    pub fn check(&mut self, state: &DecisionState, now_ms: i64, service: &'static str) {
        match self.look(state, now_ms) {
            AgeNews::Quiet => {}
            AgeNews::Stale(age_ms) => tracing::warn!(
                service,
                age_s = age_ms / 1000,
                "the last usage snapshot's window ended {} s ago (the accounting service \
                 publishes one at least every 60 s): is it running, keeping up, and set to \
                 this service's --window (snapshots of another are refused)? Ranking goes on \
                 from that snapshot plus what ran since, but its window no longer slides",
                age_ms / 1000
            ),
            AgeNews::Fresh(spell_ms) => tracing::info!(
                service,
                stale_for_s = spell_ms / 1000,
                "usage snapshots arrive again"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::tests::support::{H, leaf};

    const MIN: i64 = 60_000;

    /// A warning once per spell of old snapshots while work waits or runs, a line when a
    /// fresh one comes, and nothing for an idle cluster or one never snapshotted.
    #[test]
    fn an_old_snapshot_is_reported_once_and_its_end_too() {
        let mut h = H::new();
        h.tree(vec![leaf("a", 1)]);
        h.node("n0", 8);
        let mut age = UsageAge::default();
        let t0 = 1_000 * MIN;
        h.snapshot(t0, &[("a", 0, 1000)]);
        assert_eq!(age.look(&h.state, t0 + 10 * MIN), AgeNews::Quiet, "idle");
        h.submit(t0, "j1", "a", 1, 600);
        assert_eq!(age.look(&h.state, t0 + 4 * MIN), AgeNews::Quiet);
        assert_eq!(age.look(&h.state, t0 + 6 * MIN), AgeNews::Stale(6 * MIN));
        assert_eq!(age.look(&h.state, t0 + 9 * MIN), AgeNews::Quiet, "once");
        h.snapshot(t0 + 10 * MIN, &[("a", 0, 1000)]);
        assert_eq!(age.look(&h.state, t0 + 10 * MIN), AgeNews::Fresh(4 * MIN));
        assert_eq!(age.look(&h.state, t0 + 11 * MIN), AgeNews::Quiet);

        // Running work alone makes the cluster busy; a fresh snapshot while idle still ends
        // the spell, so the next outage is reported again.
        h.place(t0 + 11 * MIN, "j1", &[("n0", 1)]);
        h.start(t0 + 11 * MIN, "j1");
        assert_eq!(age.look(&h.state, t0 + 16 * MIN), AgeNews::Stale(6 * MIN));
        h.ok(
            t0 + 17 * MIN,
            fairshare_events::pb::event::Body::JobFinished(fairshare_events::pb::JobFinished {
                job_id: "j1".into(),
                exit_code: 0,
            }),
        );
        h.snapshot(t0 + 18 * MIN, &[("a", 0, 1000)]);
        assert_eq!(age.look(&h.state, t0 + 18 * MIN), AgeNews::Fresh(2 * MIN));
        h.submit(t0 + 19 * MIN, "j2", "a", 1, 600);
        assert_eq!(age.look(&h.state, t0 + 24 * MIN), AgeNews::Stale(6 * MIN));

        let mut never = H::new();
        never.tree(vec![leaf("a", 1)]);
        never.submit(t0, "j1", "a", 1, 600);
        assert_eq!(
            UsageAge::default().look(&never.state, t0 + 60 * MIN),
            AgeNews::Quiet
        );
    }
}
