//! The preemption service end to end and its binary run as a process: one binary, a module per
//! concern.

mod audit_cli;
mod e2e;
mod sigkill;
