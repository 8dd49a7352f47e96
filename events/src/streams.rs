//! JetStream stream definitions, as plain data.
//!
//! The NATS shell (`fairshare-runtime`) turns these into server-side configs; keeping them here
//! means operators, the deploy scripts and every service read the same definitions.
//!
//! | stream | subjects | storage | retention | duplicate window |
//! |---|---|---|---|---|
//! | `FAIRSHARE_EVENTS` | `fairshare.events.>` | file | limits (kept forever by default) | 2 h |
//! | `FAIRSHARE_INTAKE` | `fairshare.intake.>` | file | limits, 30 days | 2 h |
//!
//! The events stream is the truth every service folds; nothing is ever deleted from it by the
//! services. The duplicate window makes JetStream drop a re-published message with a message id
//! it has seen in the last two hours; beyond that the submission service's own fold of
//! idempotency keys answers retries, so de-duplication is not bounded by the window.

use std::time::Duration;

use crate::subjects;

/// How a stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// On disk; survives a server restart.
    File,
}

/// One stream's definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// Stream name.
    pub name: &'static str,
    /// Subjects it captures.
    pub subjects: Vec<String>,
    /// Storage kind.
    pub storage: Storage,
    /// Oldest message kept; `None` keeps everything.
    pub max_age: Option<Duration>,
    /// Window in which a repeated message id is dropped by the server.
    pub duplicate_window: Duration,
    /// Human description stored with the stream.
    pub description: &'static str,
}

/// Name of the stream every service folds.
pub const EVENTS_STREAM: &str = "FAIRSHARE_EVENTS";
/// Name of the durable intake stream.
pub const INTAKE_STREAM: &str = "FAIRSHARE_INTAKE";

/// Duplicate window of both streams.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(2 * 60 * 60);

/// The log of every event.
pub fn events() -> StreamSpec {
    StreamSpec {
        name: EVENTS_STREAM,
        subjects: vec![format!("{}.>", subjects::EVENTS_PREFIX)],
        storage: Storage::File,
        max_age: None,
        duplicate_window: DUPLICATE_WINDOW,
        description: "fairshare event log: jobs, policy, inventory, usage snapshots",
    }
}

/// Durable submissions waiting for the submission service.
pub fn intake() -> StreamSpec {
    StreamSpec {
        name: INTAKE_STREAM,
        subjects: vec![format!("{}.>", subjects::INTAKE_PREFIX)],
        storage: Storage::File,
        max_age: Some(Duration::from_secs(30 * 24 * 60 * 60)),
        duplicate_window: DUPLICATE_WINDOW,
        description: "fairshare durable submission intake",
    }
}

/// Every stream the system needs.
pub fn all() -> Vec<StreamSpec> {
    vec![events(), intake()]
}

/// Durable consumer name the submission service reads intake with.
pub const INTAKE_CONSUMER: &str = "fairshare-submission-intake";
