//! The fairshare simulator: real job traces and constructed scenarios replayed through the
//! services' own domain code on a virtual clock, beside baseline policies, measured the way
//! SPEC section 6 measures a cluster.
//!
//! Place in the flow: outside the running system, but made of its parts. Where the services
//! fold a JetStream log and append to it, the [`engine`] folds and appends to an in-process
//! log with the same pure domain code (submission checks, the accounting fold, the decision
//! cycle, the preemption pass), on a virtual clock with no NATS and no sleeping. Its log is
//! the contract's events and can be loaded into JetStream and audited.
//!
//! 1. [`setup`]: the cluster and budget tree, from the operators' TOML files.
//! 2. [`workload`]: jobs and operator actions, from a trace through [`mapping`] or from
//!    [`scenarios`].
//! 3. [`engine`] (fairshare) and [`baseline`] (FIFO with priorities, static quotas, decayed
//!    fair share) each turn the workload into a log.
//! 4. [`metrics`] measures every log with one fold; [`report`] renders the figures side by
//!    side as markdown and SVG.
//! 5. [`replicas`] replays the workload with every arrival nudged, so the report can say how
//!    much of a difference between policies or settings is noise.
//! 6. [`simulate`] ties the steps together for the command line and the tests; [`logfile`]
//!    writes and reads a log, and [`load`] publishes one to JetStream for an audit;
//!    [`audit`] runs the decision service's audit over a log in-process; [`memory`] sets how
//!    the process is given memory.

pub mod audit;
pub mod baseline;
pub mod engine;
pub mod load;
pub mod logfile;
pub mod mapping;
pub mod memory;
pub mod metrics;
pub mod progress;
pub mod replicas;
pub mod report;
pub mod scenarios;
pub mod setup;
pub mod simulate;
pub mod workload;
