//! The usage window the decision and preemption services take snapshots of
//! ([`crate::domain::DecisionState::set_usage_window_ms`]): what they tell the operator of
//! snapshots refused for it ([`Ignored::OtherWindow`]), and how an audit replays decisions made
//! under several windows ([`WindowedFolds`]).
//!
//! Place in the flow: beside each service's fold of the log. A refusal while following the log
//! is a warning at once (an accounting instance runs with another `--window` now); refusals
//! while catching up (snapshots of a window used before, or that instance's backlog) are
//! counted and reported once when the service is caught up, so a log of thousands of them does
//! not flood the service's output. Every decision's basis names its window, so an audit folds
//! the log once per window named and re-derives each decision from the fold of its own.

use std::collections::BTreeMap;

use fairshare_runtime::log::LogEntry;

use crate::domain::state::Ignored;

/// Snapshots of another window refused while catching up.
#[derive(Debug, Default)]
pub struct RefusedWindows {
    /// How many.
    count: u64,
    /// The last one's sequence and why.
    last: Option<(u64, Ignored)>,
}

impl RefusedWindows {
    /// Notes why the fold refused the entry at `sequence`: kept if for a snapshot's window.
    pub fn note(&mut self, sequence: u64, why: &Ignored) {
        if matches!(why, Ignored::OtherWindow { .. }) {
            self.count += 1;
            self.last = Some((sequence, why.clone()));
        }
    }

    /// Logs the count, once, if any was refused.
    pub fn report(&self, service: &str) {
        if let Some((sequence, why)) = &self.last {
            tracing::warn!(
                service,
                refused = self.count,
                last_sequence = sequence,
                "usage snapshots of another window refused while catching up; the last: {why}"
            );
        }
    }
}

/// Logs why the fold refused an entry met while following the log: a snapshot's window at
/// once as a warning (an operator must hear of it), anything else at debug level.
pub fn log_refusal(sequence: u64, subject: &str, why: &Ignored) {
    if matches!(why, Ignored::OtherWindow { .. }) {
        tracing::warn!(sequence, subject, "not folded: {why}");
    } else {
        tracing::debug!(sequence, subject, "not folded: {why}");
    }
}

/// A fold of one cluster's log that an audit can make for a usage window and feed entries.
pub trait WindowFold {
    /// An empty fold of `cluster` taking snapshots of `usage_window_ms` only (`None`: any).
    fn for_window(cluster: &str, usage_window_ms: Option<i64>) -> Self;
    /// Folds one entry.
    fn fold(&mut self, entry: &LogEntry);
}

/// Folds of one log (in order), one per usage window the decisions' bases name, each made
/// when first asked for and moved only forward: an audit asks for them in log order.
pub struct WindowedFolds<'e, F> {
    cluster: &'e str,
    entries: &'e [LogEntry],
    /// Per window as a basis names it (0: any), the fold and how many entries it has taken.
    folds: BTreeMap<i64, (F, usize)>,
}

impl<'e, F: WindowFold> WindowedFolds<'e, F> {
    /// No fold yet, over `entries` of `cluster`.
    pub fn new(cluster: &'e str, entries: &'e [LogEntry]) -> Self {
        Self {
            cluster,
            entries,
            folds: BTreeMap::new(),
        }
    }

    /// The fold taking snapshots of `usage_window_ms` (a basis's field, 0: any window) through
    /// sequence `through_sequence`.
    pub fn through(&mut self, usage_window_ms: i64, through_sequence: u64) -> &F {
        let cluster = self.cluster;
        let (fold, taken) = self.folds.entry(usage_window_ms).or_insert_with(|| {
            let window = (usage_window_ms != 0).then_some(usage_window_ms);
            (F::for_window(cluster, window), 0)
        });
        while let Some(entry) = self.entries.get(*taken)
            && entry.sequence <= through_sequence
        {
            fold.fold(entry);
            *taken += 1;
        }
        fold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refusals_for_the_window_are_counted() {
        let mut refused = RefusedWindows::default();
        refused.note(2, &Ignored::NoBody);
        assert_eq!(refused.count, 0);
        let other = Ignored::OtherWindow {
            window_ms: 2,
            expected_ms: 1,
        };
        refused.note(3, &other);
        refused.note(4, &other);
        assert_eq!(refused.count, 2);
        assert_eq!(refused.last, Some((4, other)));
    }
}
