//! The `fairshare` command-line tool run as a process against real nats-servers and simulator
//! logs: one binary, a module per command or concern.

mod audit;
mod budget_diff;
mod closed_pipe;
mod common;
mod deploy;
mod explain;
mod leases;
mod nodes;
mod queue;
mod simulate;
mod submit_exit;
mod submit_trace;
mod tail;
