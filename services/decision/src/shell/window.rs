//! The usage window the decision and preemption services take snapshots of
//! ([`crate::domain::DecisionState::set_usage_window_ms`]): what they tell the operator of
//! snapshots refused for it ([`Ignored::OtherWindow`]), and how an audit replays decisions made
//! under several windows ([`Replay`]).
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

/// A decision's basis as a replay needs it: where in the log the state it was decided from
/// ends, and which usage window that state took snapshots of. Bases sort by log position
/// first.
pub trait Basis: Ord + Copy {
    /// The last sequence folded into the deciding state.
    fn through_sequence(&self) -> u64;
    /// The usage window the deciding state took snapshots of (0: any).
    fn usage_window_ms(&self) -> i64;
    /// The time the decision was made at ("now").
    fn computed_at_ms(&self) -> i64;
}

/// Folds of one log fed entry by entry, one per usage window the bases name, stopping at each
/// basis to hand it the fold of its window exactly as far as the basis names. It holds no
/// entry, so an audit streams a log of any length through it: what it keeps is the folds and
/// the bases.
pub struct Replay<F, K> {
    /// Per usage window a basis names (0: any), its fold.
    folds: BTreeMap<i64, F>,
    /// Every basis, sorted, each once.
    bases: Vec<K>,
    /// How many of `bases` were visited.
    visited: usize,
}

impl<F: WindowFold, K: Basis> Replay<F, K> {
    /// Empty folds of `cluster`, one per window `bases` name, to stop at each of `bases`.
    pub fn new(cluster: &str, bases: impl IntoIterator<Item = K>) -> Self {
        let mut bases: Vec<K> = bases.into_iter().collect();
        bases.sort_unstable();
        bases.dedup();
        let mut folds = BTreeMap::new();
        for basis in &bases {
            let window_ms = basis.usage_window_ms();
            folds
                .entry(window_ms)
                .or_insert_with(|| F::for_window(cluster, (window_ms != 0).then_some(window_ms)));
        }
        Self {
            folds,
            bases,
            visited: 0,
        }
    }

    /// Calls `visit` for every basis whose state ends before `entry` (with the fold of its
    /// window, which has taken everything through the basis's sequence), then folds `entry`.
    /// Entries come in log order.
    pub fn feed(&mut self, entry: &LogEntry, visit: impl FnMut(&K, &F)) {
        if let Some(before) = entry.sequence.checked_sub(1) {
            self.visit_through(before, visit);
        }
        for fold in self.folds.values_mut() {
            fold.fold(entry);
        }
    }

    /// Calls `visit` for every basis not visited yet: those at or past the last entry fed.
    pub fn finish(&mut self, visit: impl FnMut(&K, &F)) {
        self.visit_through(u64::MAX, visit);
    }

    fn visit_through(&mut self, sequence: u64, mut visit: impl FnMut(&K, &F)) {
        while let Some(basis) = self.bases.get(self.visited)
            && basis.through_sequence() <= sequence
        {
            self.visited += 1;
            if let Some(fold) = self.folds.get(&basis.usage_window_ms()) {
                visit(basis, fold);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fold that remembers its window and the sequences it took.
    struct Taken(Option<i64>, Vec<u64>);

    impl WindowFold for Taken {
        fn for_window(_: &str, usage_window_ms: Option<i64>) -> Self {
            Taken(usage_window_ms, Vec::new())
        }

        fn fold(&mut self, entry: &LogEntry) {
            self.1.push(entry.sequence);
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct At(u64, i64);

    impl Basis for At {
        fn through_sequence(&self) -> u64 {
            self.0
        }

        fn usage_window_ms(&self) -> i64 {
            self.1
        }

        fn computed_at_ms(&self) -> i64 {
            0
        }
    }

    /// Each basis gets the fold of its own window, exactly through its sequence, in log order;
    /// two bases at one sequence under two windows get two folds; a basis named twice is
    /// visited once; one past the last entry is visited at the end.
    #[test]
    fn a_replay_stops_at_each_basis_with_the_fold_of_its_window() {
        let log: Vec<LogEntry> = [1, 2, 5, 6]
            .into_iter()
            .map(|sequence| {
                let started = fairshare_events::pb::JobStarted { job_id: "j".into() };
                let body = fairshare_events::pb::event::Body::JobStarted(started);
                fairshare_testkit::events::logged(sequence, String::new(), 0, body)
            })
            .collect();
        let bases = [At(4, 7), At(2, 0), At(2, 7), At(2, 7), At(9, 0)];
        let mut replay = Replay::<Taken, At>::new("c", bases);
        let mut seen = Vec::new();
        let mut visit = |at: &At, fold: &Taken| seen.push((*at, fold.0, fold.1.clone()));
        for entry in &log {
            replay.feed(entry, &mut visit);
        }
        replay.finish(&mut visit);
        assert_eq!(
            seen,
            [
                (At(2, 0), None, vec![1, 2]),
                (At(2, 7), Some(7), vec![1, 2]),
                (At(4, 7), Some(7), vec![1, 2]),
                (At(9, 0), None, vec![1, 2, 5, 6]),
            ]
        );
    }

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
