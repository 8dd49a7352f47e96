//! End-to-end tests against real nats-servers the tests start themselves: one binary, a module per
//! concern (each module says what it covers).

mod accounting;
mod auth;
mod clocks;
mod cluster;
mod crashes;
mod decision;
mod decision_checkpoint;
mod explain;
mod follower;
mod lease;
mod log_contract;
mod policy;
mod python_launcher;
mod streams;
mod submission;
mod telemetry;
