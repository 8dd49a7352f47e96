//! The pure domain model every service and the simulator share.
//!
//! Nothing here does I/O, talks to NATS or reads a clock: time is always an argument. The
//! services fold log events into these types; the simulator drives the same types directly.
//!
//! - [`budget`]: the budget tree (accounts with relative shares; leaves are allocations).
//! - [`inventory`]: a cluster's nodes and their GPUs.
//! - [`shape`]: turning a requested GPU and node count into a shape the cluster can hold.
//! - [`files`]: the TOML files managers and operators write (budget tree, inventory), parsed
//!   and validated into the events they publish.
//! - [`duration`]: human durations on the command line ("8h", "15m").
//! - [`exact`]: `floor(x * num / den)` without overflow, for fractions of the cluster.
//! - [`hour`]: the clock hours owed time is measured by (the accounting ledger, the hourly
//!   share floor).
//! - [`timestamp`]: instants for people (RFC 3339 UTC) in reasons and explanations.
//! - [`trace`]: real job traces in the `replay.csv` schema.
//! - [`words`]: counts in words for messages ("1 GPU", "8 GPUs").

pub mod budget;
pub mod duration;
pub mod exact;
pub mod files;
pub mod hour;
pub mod inventory;
pub mod logtime;
pub mod shape;
pub mod stored;
pub mod timestamp;
pub mod trace;
pub mod words;
