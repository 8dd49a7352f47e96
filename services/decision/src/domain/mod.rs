//! The pure domain core of the decision service.
//!
//! No async, no NATS, no clock: events come in as `(stream sequence, &pb::Event)` and time comes
//! in as an argument (Unix ms). The flow, in module order:
//!
//! 1. [`state`]: [`DecisionState::apply`] folds one cluster's log into the queue (per
//!    allocation, already in within-team order, in a [`queue::SortedChunks`]), the nodes and
//!    who holds their GPUs, the budget tree and the latest usage snapshot. Beside these it
//!    keeps a few derived indexes for the hot paths, never checkpointed and rebuilt on load:
//!    [`nodes`] (every registered node with its load, read as arrays), a copy on each holding
//!    of what preemption reads about its job ([`state::Holder`]) and the allocations in path
//!    order.
//! 2. [`debug`]: the debug allowance, which jobs go before rank order (read by the
//!    preemption service too).
//! 3. [`rank`]: Fair Tree over the budget tree, exact integer ratios, re-ranked incrementally as
//!    the cycle charges projected usage.
//! 4. [`fit`]: whether any queued shape fits the free GPUs at all (else a cycle places
//!    nothing, and the simulator skips it). [`place`]: best-fit packing of single-node jobs, whole nodes for multi-node jobs, never on
//!    cordoned nodes or across a maintenance window.
//! 5. [`reserve`]: the cycle's reservation for the top blocked job and the backfill rule that
//!    keeps it safe.
//! 6. [`decide`](mod@decide): [`decide()`] runs one cycle and returns a [`Decision`]
//!    (placements, reservation, a reason for every waiting job), which
//!    [`Decision::events`] turns into `JobPlaced` events with their [`DecisionBasis`]
//!    (`fairshare_events::pb::DecisionBasis`).
//! 7. For people: [`explain()`] (why one job waits) and [`listing()`] (the live jobs in the
//!    order the next cycle meets them), each deciding afresh when asked.
//!
//! [`DecisionBasis`]: fairshare_events::pb::DecisionBasis

pub mod debug;
pub mod decide;
pub mod explain;
pub mod fit;
mod flat;
mod flight;
pub mod hourly;
mod join;
pub mod listing;
pub mod nodes;
mod persist;
pub mod place;
pub mod promise;
pub mod queue;
pub mod rank;
pub mod reserve;
pub mod state;

#[cfg(test)]
pub(crate) mod tests;

pub use decide::{Decision, NodeGpus, Placement, WaitReason, Waiting, decide, decide_placements};
pub use explain::explain;
pub use listing::listing;
pub use rank::{FairTree, LeafUsage, cmp_ratio, fair_tree_order};
pub use reserve::Reservation;
pub use state::{DecisionState, Ignored};
