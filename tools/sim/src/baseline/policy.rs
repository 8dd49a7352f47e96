//! What the replay tells a baseline policy, and what it asks of it.
//!
//! Place in the flow: the replay ([`super::replay`]) owns the clock, the nodes and the log; a
//! [`Policy`] owns only its queues and whatever it ranks by (quotas, decayed usage). The replay
//! hands it accepted jobs, finishes and share changes, and once per batch of same-time
//! happenings asks it for a scheduling pass. No policy ever preempts, so a job, once started,
//! runs to its finish.

use fairshare_model::budget::{BudgetTree, Fraction};
use fairshare_model::shape::Shape;

use super::allocations::Allocations;
use super::cluster::Cluster;
use super::pass::Start;

/// An accepted job, as the policies see it. Jobs are numbered by acceptance order (their
/// *ticket*), which is submit time then workload index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Job {
    /// The job id written in the log.
    pub id: String,
    /// The allocation it charges, as a slot of [`super::allocations::Allocations`].
    pub allocation: usize,
    /// Its resolved shape.
    pub shape: Shape,
    /// Declared priority within its team (higher first).
    pub priority: i32,
    /// How long it runs once started, in ms.
    pub duration_ms: i64,
    /// Minimum runtime 0: work a site would run in a scavenger class, after all allocated
    /// work, charging nobody ([`super`]).
    pub unallocated: bool,
}

impl Job {
    /// GPUs over all its nodes.
    pub fn gpus(&self) -> u64 {
        self.shape.total_gpus()
    }
}

/// A baseline scheduling policy.
pub(crate) trait Policy {
    /// The budget tree in force changed (also called once before anything else): `fractions`
    /// has one entry per allocation slot, 0 for slots the tree no longer has.
    fn set_shares(&mut self, fractions: &[Fraction]);

    /// The budget tree in force, whole, with the run's allocation slots (called right after
    /// [`Policy::set_shares`]), for a policy that ranks by the tree's levels.
    fn set_tree(&mut self, _tree: &BudgetTree, _allocations: &Allocations) {}

    /// The virtual clock moves to `now_ms`, before the happenings at that time are applied.
    fn advance(&mut self, _now_ms: i64) {}

    /// An accepted job joins the queue.
    fn enqueue(&mut self, ticket: usize, job: &Job);

    /// A running job ended and gave its GPUs back.
    fn finished(&mut self, job: &Job);

    /// One scheduling pass at `cluster.now_ms`: place waiting jobs on `cluster`'s nodes as the
    /// policy allows ([`super::pass::walk`]), appending each placement to `started` in
    /// placement order.
    fn pass(&mut self, jobs: &[Job], cluster: &mut Cluster, started: &mut Vec<Start>);
}
