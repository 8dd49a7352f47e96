//! The preemption state: the decision service's fold of one cluster's log, plus what only the
//! preemption service needs to remember.
//!
//! Place in the flow: the shell reads `FAIRSHARE_EVENTS` in order and hands each event with
//! its stream sequence to [`PreemptionState::apply`]. The heavy part, queues, placements,
//! holdings per node, usage snapshot, budget tree, cordons and maintenance windows, is
//! [`fairshare_decision::domain::DecisionState`] itself, folded from the same events, so the
//! preemption service ranks allocations and sees free GPUs exactly as the decision service
//! does. On top of it this state keeps three small indexes the decision fold has no reason to
//! expose:
//!
//! - the preemption orders still outstanding (job -> who it makes room for, why, deadline), so
//!   the grace deadline can be enforced even for a job on a node removed since;
//! - the resumable jobs preempted and not yet requeued (the service owes them a
//!   `JobRequeued`);
//! - the cordoned nodes already reported drained since their cordon (or since work last landed
//!   on them), so `NodeDrained` is published once per cordon and says the node is empty.
//!
//! Like the decision fold it is a pure function of the events applied: an event the decision
//! fold refuses changes none of these indexes either.

use std::collections::{BTreeMap, BTreeSet};

use fairshare_decision::domain::state::{Job, JobStatus, Placed};
use fairshare_decision::domain::{DecisionState, Ignored};
use fairshare_events::pb::{self, event::Body};
use fairshare_model::logtime::effective_at;
use serde::{Deserialize, Serialize};

/// An outstanding preemption order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The earliest deadline ordered (a second order can only bring it forward).
    pub grace_deadline_ms: i64,
    /// The waiting job it makes room for; empty for drains and maintenance.
    pub for_job_id: String,
    /// Why, in words, as written on the first order.
    pub reason: String,
    /// When the first order took effect.
    pub ordered_at_ms: i64,
}

/// One cluster's state as the preemption service sees it.
///
/// Serializable for the shell's sled checkpoint: restored from its bytes and fed the rest of
/// the log, it equals the state fed the whole log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreemptionState {
    decision: DecisionState,
    orders: BTreeMap<String, Order>,
    awaiting_requeue: BTreeSet<String>,
    drain_reported: BTreeSet<String>,
}

impl PreemptionState {
    /// An empty state for cluster `cluster`.
    pub fn new(cluster: impl Into<String>) -> PreemptionState {
        PreemptionState {
            decision: DecisionState::new(cluster),
            orders: BTreeMap::new(),
            awaiting_requeue: BTreeSet::new(),
            drain_reported: BTreeSet::new(),
        }
    }

    /// The decision service's view of the cluster, folded from the same events.
    pub fn decision(&self) -> &DecisionState {
        &self.decision
    }

    /// Sets the debug allowance of the decision fold inside (see
    /// [`DecisionState::set_debug_allowance_gpus`]).
    pub fn set_debug_allowance_gpus(&mut self, gpus: u32) {
        self.decision.set_debug_allowance_gpus(gpus);
    }

    /// Turns the share floor of the decision fold inside on or off (see
    /// [`DecisionState::set_share_floor`]).
    pub fn set_share_floor(&mut self, on: bool) {
        self.decision.set_share_floor(on);
    }

    /// Turns the hourly floor of the decision fold inside on or off (see
    /// [`DecisionState::set_hourly_floor`]).
    pub fn set_hourly_floor(&mut self, on: bool) {
        self.decision.set_hourly_floor(on);
    }

    /// Sets the usage window of the decision fold inside (see
    /// [`DecisionState::set_usage_window_ms`]).
    pub fn set_usage_window_ms(&mut self, usage_window_ms: Option<i64>) {
        self.decision.set_usage_window_ms(usage_window_ms);
    }

    /// The cluster this state follows.
    pub fn cluster(&self) -> &str {
        self.decision.cluster()
    }

    /// The last stream sequence applied.
    pub fn last_applied(&self) -> u64 {
        self.decision.last_applied()
    }

    /// Outstanding preemption orders by job id.
    pub fn orders(&self) -> &BTreeMap<String, Order> {
        &self.orders
    }

    /// Resumable jobs preempted and not yet requeued, by id.
    pub fn awaiting_requeue(&self) -> &BTreeSet<String> {
        &self.awaiting_requeue
    }

    /// Whether `NodeDrained` was already published for `node` since it was last cordoned.
    pub fn drain_reported(&self, node: &str) -> bool {
        self.drain_reported.contains(node)
    }

    /// A live job and, if it holds GPUs, its placement.
    pub fn placed(&self, job_id: &str) -> Option<(&Job, &Placed)> {
        let job = self.decision.job(job_id)?;
        match &job.status {
            JobStatus::Placed(p) => Some((job, p)),
            _ => None,
        }
    }

    /// Applies the event at stream `sequence` (see
    /// [`DecisionState::apply`] for what is refused and why).
    pub fn apply(&mut self, sequence: u64, event: &pb::Event) -> Result<(), Ignored> {
        self.apply_stored(sequence, event, None)
    }

    /// [`Self::apply`] for an entry the stream stored at `stored_ms`: its time is clamped as
    /// [`DecisionState::apply_stored`] clamps it, here too (an order's time).
    pub fn apply_stored(
        &mut self,
        sequence: u64,
        event: &pb::Event,
        stored_ms: Option<i64>,
    ) -> Result<(), Ignored> {
        self.decision.apply_stored(sequence, event, stored_ms)?;
        let Some(body) = &event.body else {
            return Ok(());
        };
        match body {
            Body::PreemptionOrdered(p) => {
                let order = self.orders.entry(p.job_id.clone()).or_insert(Order {
                    grace_deadline_ms: p.grace_deadline_ms,
                    for_job_id: p.for_job_id.clone(),
                    reason: p.reason.clone(),
                    ordered_at_ms: effective_at(event.at_ms, stored_ms),
                });
                order.grace_deadline_ms = order.grace_deadline_ms.min(p.grace_deadline_ms);
            }
            Body::JobPreempted(p) => {
                self.orders.remove(&p.job_id);
                // The decision fold keeps a resumable job as "preempted" and forgets the rest.
                if self
                    .decision
                    .job(&p.job_id)
                    .is_some_and(|j| j.status == JobStatus::Preempted)
                {
                    self.awaiting_requeue.insert(p.job_id.clone());
                }
            }
            Body::JobRequeued(r) => {
                self.awaiting_requeue.remove(&r.job_id);
            }
            Body::JobFinished(pb::JobFinished { job_id, .. })
            | Body::JobFailed(pb::JobFailed { job_id, .. })
            | Body::JobCancelled(pb::JobCancelled { job_id, .. }) => {
                self.orders.remove(job_id);
                self.awaiting_requeue.remove(job_id);
            }
            // A report is fenced on the node's own events only: a placement decided before the
            // cordon (on the job's subject) can land between the state it was decided from and
            // the report. A report of a node that holds work here is not a report of the node
            // as it is: it is reported again once that work is gone.
            Body::NodeDrained(n)
                if self
                    .decision
                    .load(&n.node)
                    .is_none_or(|l| l.holdings.is_empty()) =>
            {
                self.drain_reported.insert(n.node.clone());
            }
            // A placement decided before the cordon can land after the node was reported
            // drained: it is busy again, and is reported again once its drain empties it.
            Body::JobPlaced(p) => {
                // Only nodes it takes GPUs on (the decision fold drops entries of 0 GPUs).
                for n in p.nodes.iter().filter(|n| n.gpus > 0) {
                    self.drain_reported.remove(&n.node);
                }
            }
            // A new cordon needs a new report; an uncordon or removal ends the drain.
            Body::NodeCordoned(pb::NodeCordoned { node, .. })
            | Body::NodeUncordoned(pb::NodeUncordoned { node, .. })
            | Body::NodeRemoved(pb::NodeRemoved { node, .. }) => {
                self.drain_reported.remove(node);
            }
            _ => {}
        }
        Ok(())
    }
}
