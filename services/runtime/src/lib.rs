//! The imperative shell every fairshare service shares.
//!
//! Services keep their domain logic pure (no async, no NATS, no wall clock); everything that
//! touches the outside world for them lives here, once:
//!
//! - [`admin`]: appending budget trees and node registrations.
//! - [`auth`]: per-service NATS identities (nkeys) and the server permissions of each.
//! - [`checkpoint`]: the sled checkpoint (state plus last applied sequence), a cache of the fold.
//! - [`cli`]: the NATS flags every binary shares.
//! - [`clock`]: the injected clock (system time in production, a manual clock in tests).
//! - [`disconnect`]: how long a client has been cut off from NATS (buffered writes outliving
//!   the duplicate window).
//! - [`output`]: standard output for command-line binaries, quiet on a closed pipe.
//! - [`nats`]: connecting, and creating or updating the JetStream streams of
//!   [`fairshare_events::streams`].
//! - [`lease`]: one deciding instance per cluster and role (a lease in a key-value bucket).
//! - [`log`]: following the event log in stream order from a given sequence.
//! - [`missing`]: what to do when JetStream, or the events stream, is missing on the server.
//! - [`retry`]: the back-off after writes of unknown outcome.
//! - [`envelope`]: building the headers every published message carries.
//! - [`shutdown`]: the process signal future `main` hands to a service's `run`.
//! - [`task`]: background tasks aborted with the service future that spawned them.
//! - [`telemetry`]: logs and OpenTelemetry export for binaries, and the span each service opens
//!   per message it handles.

pub mod admin;
pub mod auth;
pub mod checkpoint;
pub mod cli;
pub mod clock;
pub mod disconnect;
pub mod envelope;
pub mod findings;
pub mod held_clock;
pub mod lease;
pub mod log;
pub mod missing;
pub mod nats;
pub mod output;
pub mod reply;
pub mod retry;
pub mod shutdown;
pub mod task;
pub mod telemetry;
pub mod two_reads;
