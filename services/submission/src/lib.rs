//! Submission service: the front door of the event flow.
//!
//! Launchers send submit and cancel requests (NATS request/reply), or publish submissions to the
//! durable intake stream when they must not lose one while this service is down. The service
//! checks each against its view of budgets and inventory, and appends exactly one
//! `JobSubmitted` (or, for intake, `JobRejected`) event per idempotency key to the log; every
//! other service starts from those events. A request that fails a check changes nothing.
//!
//! - [`domain`]: the pure core: the state folded from the log, and the checks.
//! - [`shell`]: the NATS side: request handlers, the intake consumer, the log follower.

pub mod domain;
pub mod shell;

pub use shell::{Config, ServiceError, run};
