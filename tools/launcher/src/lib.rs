//! Demo launcher: the launcher side of the event flow, for a simulated cluster.
//!
//! A real launcher starts containers; this one pretends. It follows its cluster's job events,
//! confirms every placement with `JobStarted`, and after the job's duration (read from its
//! payload, `sleep <seconds>`, sped up by a time scale) reports `JobFinished`. It can also submit
//! a workload from a trace. It serves the local demo stack and the end-to-end tests.
//!
//! - [`state`]: the pure part: which jobs are placed, running, due to finish.
//! - [`runner`]: the NATS loop that turns due actions into events.
//! - [`submit`]: a submission sent again with its key until a final answer comes.
//! - [`workload`]: jobs from a `replay.csv` trace, mapped onto a budget tree.

pub mod runner;
pub mod state;
pub mod submit;
pub mod workload;
