//! The pure domain core of the preemption service.
//!
//! No async, no NATS, no clock: events come in as `(stream sequence, &pb::Event)` and time
//! comes in as an argument (Unix ms). The flow, in module order:
//!
//! 1. [`state`]: [`PreemptionState::apply`] folds one cluster's log with the decision
//!    service's own fold ([`fairshare_decision::domain::DecisionState`]) plus the outstanding
//!    orders, the preempted jobs owed a requeue and the drains already reported.
//! 2. [`contract`]: the minimum-runtime contract (cap, unallocated, protection, debug jobs,
//!    lost work), and [`config`] its tunables.
//! 3. `view` (internal): the GPUs a waiter could get, as the decision service
//!    would place it.
//! 4. [`victims`]: the first waiting allocated job that does not fit, and the cheapest
//!    allowed victims that make it fit, ranked with the decision service's Fair Tree (or, when
//!    it cannot be helped, victims off its reserved nodes for a job behind it: unallocated
//!    work, or what the rules allow while that job's allocation is below its share floor).
//!    When no rule lets that waiter take anyone's work, [`pack`] may move small jobs off one
//!    node into free GPUs elsewhere so it fits there.
//! 5. [`grace`]: kills at the grace deadline and requeues.
//! 6. [`drain`]: cordoned nodes and maintenance windows.
//! 7. [`decide`](mod@decide): [`decide_preemptions()`] runs one pass and returns the event
//!    bodies to append, each `PreemptionOrdered` with its `DecisionBasis`.
//!
//! How decision and preemption coordinate (only through the log): the decision service places
//! what fits and leaves the rest waiting; this service sees the same waiting job, orders
//! victims off (`PreemptionOrdered`); the decision fold counts their GPUs reclaimable at the
//! grace deadline; the launcher confirms (`JobPreempted`) or this service kills at the deadline;
//! the freed GPUs trigger a decision cycle that places the waiter; this service requeues the
//! resumable victims (`JobRequeued`), which the decision service queues again in their old
//! place.

pub mod config;
pub mod contract;
pub mod decide;
pub mod drain;
pub mod grace;
pub mod pack;
pub mod state;
pub mod victims;
mod view;

#[cfg(test)]
mod tests;

pub use config::{Config, ConfigError};
pub use contract::is_debug;
pub use decide::{
    decide_preemptions, decide_preemptions_and_retry, into_events, next_due, stamp_cycle,
};
pub use grace::{expired, requeues};
pub use pack::PackPlan;
pub use state::{Order, PreemptionState};
pub use victims::{
    FairShare, Grounds, Line, NoVictims, Victim, VictimPlan, Waiter, fair_share, select_victims,
};
