//! The pure domain core of the accounting service.
//!
//! No async, no NATS, no clock: events come in as `(stream sequence, &pb::Event)` and time comes
//! in as an argument (Unix ms). The flow, in module order:
//!
//! 1. [`fold`]: [`UsageFold::apply`] skips redeliveries by sequence, routes each event to its
//!    cluster, checks job transitions against the live [`jobs`] table (keyed by [`ids`]) and
//!    the clusters' [`ended`] sets, and records an [`outcome::Applied`].
//! 2. [`cluster`]: one cluster's state; its clock never goes backwards; each job transition
//!    changes rates on [`curve`]s (charged GPUs per allocation, unallocated GPUs), node events
//!    change [`capacity`], budget trees start [`budget`] epochs over interned [`paths`].
//! 3. [`ledger`]: the same transitions drive hourly demand/run meters; hours close as the
//!    cluster's clock crosses them.
//! 4. [`window`]: queries for any `now` at or after the clock: differences of cumulative curves,
//!    exact in integers ([`exact`]), answered as [`report`] types.
//!
//! Memory follows the window: as a cluster's clock moves (once per W/8, between 1 and 24 hours),
//! curve breakpoints, budget epochs and ended jobs wholly before `clock - W` are dropped. The
//! state is a pure function of the events applied (queries never change it), and serializable
//! with serde for checkpoints.

pub mod budget;
pub mod capacity;
pub mod cluster;
pub mod config;
pub mod curve;
pub mod ended;
pub mod exact;
pub mod fold;
pub mod ids;
pub mod jobs;
pub mod ledger;
pub mod outcome;
pub mod paths;
pub mod report;
pub mod window;

#[cfg(test)]
mod tests;

pub use cluster::ClusterState;
pub use config::{ConfigError, DEFAULT_WINDOW_MS, FoldConfig};
pub use fold::{Footprint, MAX_AHEAD_OF_LOG_MS, QueryError, UsageFold};
pub use ledger::{HOUR_MS, LedgerTotals};
pub use outcome::{Applied, FoldCounts, Skip};
pub use report::{AccountUsage, LedgerReport, LedgerRow, Ratio, WindowReport};
