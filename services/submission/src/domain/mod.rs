//! The pure core of the submission service: no async, no NATS, no clock.
//!
//! [`SubmissionState`] is a fold of the log; [`check_submission`] and [`check_cancel`] decide
//! whether a request may be appended, and build the event to append.

mod checks;
mod limits;
mod state;

pub use checks::{
    CancelTarget, Checked, MAX_REJECTION_MESSAGE_BYTES, bounded, check_cancel, check_submission,
    idempotency_key_problem, job_submitted, key_reused,
};
pub use limits::Limits;
pub use state::{
    Applied, FORGET_AFTER_MS, Forget, INTAKE_RETRY_MARGIN_MS, JobRecord, JobStatus, KeyOutcome,
    SubmissionState, request_fingerprint,
};

#[cfg(test)]
mod tests;
