//! The fairshare wire contract, shared by every service, the CLI, the simulator and launchers.
//!
//! Everything that crosses NATS is defined here and nowhere else:
//!
//! - [`pb`]: the protobuf types generated from `schemas/fairshare/v1/fairshare.proto`.
//! - [`subjects`]: the subject scheme. Every event lives in the `FAIRSHARE_EVENTS` stream under
//!   `fairshare.events.<cluster>.…`, so one cluster's log can be consumed (and its decisions run)
//!   on its own instance; every event of one job is under
//!   `fairshare.events.<cluster>.job.<job_id>.<kind>`, and optimistic concurrency on a job checks
//!   the last sequence over all its kinds.
//! - [`streams`]: the JetStream stream definitions (file storage, limits retention, duplicate
//!   window), as plain data so this crate does not depend on a NATS client.
//! - [`headers`]: envelope conventions carried in NATS headers: the de-duplicating message id,
//!   optimistic concurrency, the launcher's key, and W3C trace context (which links each effect
//!   to its cause).
//! - [`codec`]: encode and decode with errors that say what was wrong with the bytes.
//!
//! ```
//! use fairshare_events::{codec, pb, subjects};
//!
//! let event = pb::Event {
//!     at_ms: 1_700_000_000_000,
//!     body: Some(pb::event::Body::JobStarted(pb::JobStarted { job_id: "j1".into() })),
//! };
//! let bytes = codec::encode(&event);
//! assert_eq!(codec::decode_event(&bytes).unwrap(), event);
//! assert_eq!(
//!     subjects::job_event("alpha", "j1", codec::event_kind(&event)),
//!     "fairshare.events.alpha.job.j1.job_started"
//! );
//! ```

pub mod codec;
pub mod headers;
mod json;
pub mod streams;
pub mod subjects;

/// Types generated from the protobuf schema (package `fairshare.v1`).
#[allow(missing_docs, clippy::all)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/fairshare.v1.rs"));
}

pub use codec::DecodeError;

impl pb::PreemptionCause {
    /// The cause in an operator's words, as reports and `fairshare explain` print it.
    pub fn label(self) -> &'static str {
        match self {
            pb::PreemptionCause::Unspecified => "unspecified",
            pb::PreemptionCause::Unallocated => "unallocated",
            pb::PreemptionCause::Window => "window",
            pb::PreemptionCause::ShareFloor => "share floor",
            pb::PreemptionCause::DebugAllowance => "debug allowance",
            pb::PreemptionCause::Packing => "packing",
            pb::PreemptionCause::Maintenance => "maintenance",
        }
    }
}
