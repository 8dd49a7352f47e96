//! What applying one event did, and running counts of it.
//!
//! Place in the flow: the fold returns an [`Applied`] for every `(sequence, event)` it is given
//! and keeps [`FoldCounts`] (in its checkpoint; the benches and tests read them), so the shell
//! can log skipped and clamped events. Nothing here changes usage: an ignored event changes only these counters and the
//! last applied sequence.

use serde::{Deserialize, Serialize};

/// Why an event changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Skip {
    /// Its sequence is at or below the last applied one (a redelivery).
    DuplicateSequence,
    /// A job event for a job the fold does not know (never submitted, or ended and forgotten
    /// after leaving the window).
    UnknownJob,
    /// A second `JobSubmitted` for a job id already known.
    DuplicateSubmit,
    /// A `JobSubmitted` stamped at or before its cluster's window start (`clock - W`): a stale
    /// re-publication. The fold may already have forgotten that job (it ended outside the
    /// window), so accepting it again would create a phantom queued job.
    StaleSubmit,
    /// `JobPlaced` for a job that is not queued.
    PlaceNotQueued,
    /// `JobStarted` for a job that is not placed.
    StartNotPlaced,
    /// `JobPreempted` for a job that is not running or placed.
    PreemptNotRunning,
    /// Finish, failure or cancellation of a job that already ended (a double stop).
    AlreadyEnded,
    /// `JobRequeued` for a job that was not preempted.
    RequeueNotPreempted,
    /// A `JobSubmitted` without a spec, with a negative minimum runtime, or without a usable
    /// GPU count.
    Malformed,
    /// A `BudgetTreeSet` that does not validate; the tree in force stays.
    InvalidBudgetTree,
    /// `NodeRemoved` for a node that is not registered.
    UnknownNode,
}

/// The result of applying one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Applied {
    /// The event changed the accounting state.
    Changed,
    /// The event changed the state, but its time was before its cluster's clock and it took
    /// effect at the clock instead (clocks never go backwards).
    Clamped,
    /// An event kind accounting does not use (placements, cordons, snapshots, ...).
    NoEffect,
    /// The event was ignored, for the reason given.
    Skipped(Skip),
}

/// Running counts of what the fold did with the events it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldCounts {
    /// Events that changed the state (including clamped ones).
    pub changed: u64,
    /// Of those, events whose time was clamped to their cluster's clock.
    pub clamped: u64,
    /// Events of kinds accounting does not use.
    pub no_effect: u64,
    /// Redeliveries skipped by sequence.
    pub duplicate_sequence: u64,
    /// Events for unknown jobs.
    pub unknown_job: u64,
    /// Second submissions of a known job id.
    pub duplicate_submit: u64,
    /// Submissions stamped before their cluster's window start.
    pub stale_submit: u64,
    /// Placements of jobs that were not queued.
    pub place_not_queued: u64,
    /// Starts of jobs that were not placed.
    pub start_not_placed: u64,
    /// Preemptions of jobs that were not running.
    pub preempt_not_running: u64,
    /// Stops of jobs that had already ended.
    pub already_ended: u64,
    /// Requeues of jobs that were not preempted.
    pub requeue_not_preempted: u64,
    /// Unusable submissions.
    pub malformed: u64,
    /// Budget trees that did not validate.
    pub invalid_budget_tree: u64,
    /// Removals of unregistered nodes.
    pub unknown_node: u64,
}

impl FoldCounts {
    /// Counts one outcome.
    pub fn record(&mut self, applied: Applied) {
        let slot = match applied {
            Applied::Changed => &mut self.changed,
            Applied::Clamped => {
                self.clamped += 1;
                &mut self.changed
            }
            Applied::NoEffect => &mut self.no_effect,
            Applied::Skipped(skip) => match skip {
                Skip::DuplicateSequence => &mut self.duplicate_sequence,
                Skip::UnknownJob => &mut self.unknown_job,
                Skip::DuplicateSubmit => &mut self.duplicate_submit,
                Skip::StaleSubmit => &mut self.stale_submit,
                Skip::PlaceNotQueued => &mut self.place_not_queued,
                Skip::StartNotPlaced => &mut self.start_not_placed,
                Skip::PreemptNotRunning => &mut self.preempt_not_running,
                Skip::AlreadyEnded => &mut self.already_ended,
                Skip::RequeueNotPreempted => &mut self.requeue_not_preempted,
                Skip::Malformed => &mut self.malformed,
                Skip::InvalidBudgetTree => &mut self.invalid_budget_tree,
                Skip::UnknownNode => &mut self.unknown_node,
            },
        };
        *slot += 1;
    }

    /// Events ignored for any reason except redelivery.
    pub fn ignored(&self) -> u64 {
        self.unknown_job
            + self.duplicate_submit
            + self.stale_submit
            + self.place_not_queued
            + self.start_not_placed
            + self.preempt_not_running
            + self.already_ended
            + self.requeue_not_preempted
            + self.malformed
            + self.invalid_budget_tree
            + self.unknown_node
    }
}
