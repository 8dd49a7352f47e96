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
///
/// Timing is off unless asked for ([`PartTimes::timed`]): reading the clock twice per event
/// and per service call cost about 2% of a run's wall time, which only the bench wants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartTimes {
    /// Time per part, by [`Part`] index.
    parts: [Duration; Part::ALL.len()],
    /// Whether the clock is read at all.
    on: bool,
}

impl PartTimes {
    /// Times that the run fills in (the default stays at zero and reads no clock).
    pub fn timed() -> Self {
        PartTimes {
            on: true,
            ..PartTimes::default()
        }
    }

    /// The start of a part: now, if timing is on.
    pub fn start(&self) -> Option<Instant> {
        self.on.then(Instant::now)
    }

    /// Adds the time since `since` to `part`, and returns now (the next part's start); nothing
    /// with timing off.
    pub fn add_since(&mut self, part: Part, since: Option<Instant>) -> Option<Instant> {
        let since = since?;
        let now = Instant::now();
        self.add(part, now.saturating_duration_since(since));
        Some(now)
    }

    /// Adds `time` to `part`.
    pub fn add(&mut self, part: Part, time: Duration) {
        if let Some(t) = self.parts.get_mut(part as usize) {
            *t = t.saturating_add(time);
        }
    }

    /// The time of `part`.
    pub fn get(&self, part: Part) -> Duration {
        self.parts.get(part as usize).copied().unwrap_or_default()
    }

    /// The sum over every part.
    pub fn total(&self) -> Duration {
        self.parts.iter().sum()
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

    #[test]
    fn untimed_parts_read_no_clock_and_stay_at_zero() {
        let mut off = PartTimes::default();
        let start = off.start();
        assert_eq!(start, None);
        assert_eq!(off.add_since(Part::Snapshots, start), None);
        assert_eq!(off.total(), Duration::ZERO);
        let mut on = PartTimes::timed();
        let start = on.start();
        std::thread::sleep(Duration::from_millis(2));
        assert!(on.add_since(Part::Snapshots, start).is_some());
        assert!(on.get(Part::Snapshots) >= Duration::from_millis(2));
    }
}
