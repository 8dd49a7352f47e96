//! Where a fairshare run's wall time goes, part by part, for the replay bench.
//!
//! Place in the flow: [`super::run`] and [`super::services::Services::append`] add each
//! part's time as they go. The figures differ from run to run, so they never reach the report
//! (which must be byte-identical for the same inputs); `cargo bench -p fairshare-sim --bench
//! replay` prints them, to say what a faster simulator has to change.

use std::time::{Duration, Instant};

/// One part of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Submission checks (`check_submission`).
    SubmissionChecks,
    /// The submission service's fold of every event.
    SubmissionFold,
    /// The accounting service's fold of every event.
    AccountingFold,
    /// The preemption service's fold of every event, which holds the decision service's.
    DecisionFold,
    /// Usage snapshot reports (`UsageFold::window`).
    Snapshots,
    /// Decision cycles: whether any queued shape fits, then `decide_placements`.
    DecisionCycles,
    /// Preemption passes (`decide_preemptions`).
    PreemptionPasses,
    /// The preemption service's next wake-up (`next_due`).
    Timers,
}

impl Part {
    /// Every part, in the order the bench prints them.
    pub const ALL: [Part; 8] = [
        Part::SubmissionChecks,
        Part::SubmissionFold,
        Part::AccountingFold,
        Part::DecisionFold,
        Part::Snapshots,
        Part::DecisionCycles,
        Part::PreemptionPasses,
        Part::Timers,
    ];

    /// Its name in the bench's output.
    pub fn name(self) -> &'static str {
        match self {
            Part::SubmissionChecks => "submission checks",
            Part::SubmissionFold => "submission fold",
            Part::AccountingFold => "accounting fold",
            Part::DecisionFold => "decision and preemption fold",
            Part::Snapshots => "usage snapshot reports",
            Part::DecisionCycles => "decision cycles",
            Part::PreemptionPasses => "preemption passes",
            Part::Timers => "preemption wake-ups",
        }
    }
}

/// Wall time per [`Part`], each counted once (a cycle's time leaves out folding the events it
/// appends, which the folds count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartTimes([Duration; Part::ALL.len()]);

impl PartTimes {
    /// Adds the time since `since` to `part`, and returns now (the next part's start).
    pub fn add_since(&mut self, part: Part, since: Instant) -> Instant {
        let now = Instant::now();
        self.add(part, now.saturating_duration_since(since));
        now
    }

    /// Adds `time` to `part`.
    pub fn add(&mut self, part: Part, time: Duration) {
        if let Some(t) = self.0.get_mut(part as usize) {
            *t = t.saturating_add(time);
        }
    }

    /// The time of `part`.
    pub fn get(&self, part: Part) -> Duration {
        self.0.get(part as usize).copied().unwrap_or_default()
    }

    /// The sum over every part.
    pub fn total(&self) -> Duration {
        self.0.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_part_keeps_its_own_time() {
        let mut t = PartTimes::default();
        t.add(Part::Snapshots, Duration::from_millis(3));
        t.add(Part::PreemptionPasses, Duration::from_millis(5));
        t.add(Part::Snapshots, Duration::from_millis(1));
        assert_eq!(t.get(Part::Snapshots), Duration::from_millis(4));
        assert_eq!(t.get(Part::PreemptionPasses), Duration::from_millis(5));
        assert_eq!(t.get(Part::Timers), Duration::ZERO);
        assert_eq!(t.total(), Duration::from_millis(9));
        // Every part has its own slot and name.
        let names: std::collections::BTreeSet<_> = Part::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), Part::ALL.len());
        for (i, p) in Part::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i);
        }
    }
}
