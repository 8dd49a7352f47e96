//! The checks a submission or cancellation must pass before anything is appended.
//!
//! Each failure has its own [`RejectionCode`] and a message a person can act on. The checks
//! only read the state; a rejected request leaves the log and the state untouched.

use fairshare_events::pb::{self, RejectionCode};
use fairshare_events::subjects;
use fairshare_model::shape::{self, Shape, ShapeError};

use super::limits::Limits;
use super::state::{JobStatus, KeyOutcome, SubmissionState, request_fingerprint};

fn reject(code: RejectionCode, message: impl Into<String>) -> pb::Rejection {
    pb::Rejection {
        code: code as i32,
        message: bounded(message.into(), MAX_REJECTION_MESSAGE_BYTES),
    }
}

/// Longest rejection message written or sent: messages quote what was submitted, and a
/// rejection must stay well within a NATS message (1 MB by default) whatever that was.
pub const MAX_REJECTION_MESSAGE_BYTES: usize = 1024;

/// `text` cut to at most `max` bytes at a character boundary, ending in `…` when cut.
pub fn bounded(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

/// What a submission that passed the checks needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// A new submission: append it with this shape.
    New(Shape),
    /// This key was accepted before: answer with the first job, write nothing.
    Repeat {
        /// The job accepted first.
        job_id: String,
        /// Its job-submitted sequence.
        sequence: u64,
    },
}

/// What is wrong with `key` as an idempotency key, if anything: it must be 1 to
/// `max_idempotency_key_bytes` bytes with no control character (it travels in a NATS header,
/// where a line break cannot, and in every log line about the job).
pub fn idempotency_key_problem(key: &str, limits: &Limits) -> Option<String> {
    if key.is_empty() || key.len() > limits.max_idempotency_key_bytes {
        return Some(format!(
            "idempotency key must be 1..={} bytes, got {}",
            limits.max_idempotency_key_bytes,
            key.len()
        ));
    }
    key.chars().find(|c| c.is_control()).map(|c| {
        format!(
            "idempotency key must not contain control characters, found {:?}",
            c
        )
    })
}

/// The rejection of a request that reuses the key job `job_id` was accepted with.
pub fn key_reused(key: &str, job_id: &str) -> pb::Rejection {
    reject(
        RejectionCode::KeyReused,
        format!(
            "idempotency key {key:?} was used for job {job_id} with another request; a retry \
             must repeat that request exactly, a new submission needs a new key"
        ),
    )
}

/// `s` seconds as a person reads them: "32400 s (9 h)", "600 s (10 min)"; a time that is no
/// whole number of minutes stays in seconds.
fn seconds(s: i64) -> String {
    if s >= 3600 && s % 3600 == 0 {
        format!("{s} s ({} h)", s / 3600)
    } else if s >= 60 && s % 60 == 0 {
        format!("{s} s ({} min)", s / 60)
    } else {
        format!("{s} s")
    }
}

/// Checks a submit request against the folded state and the limits.
pub fn check_submission(
    state: &SubmissionState,
    request: &pb::SubmitRequest,
    limits: &Limits,
) -> Result<Checked, pb::Rejection> {
    let key = &request.idempotency_key;
    if let Some(problem) = idempotency_key_problem(key, limits) {
        return Err(reject(RejectionCode::BadIdempotencyKey, problem));
    }
    match state.keys.get(key) {
        Some(KeyOutcome::Accepted {
            job_id,
            sequence,
            request: first,
        }) => {
            if *first != request_fingerprint(request.spec.as_ref()) {
                return Err(key_reused(key, job_id));
            }
            return Ok(Checked::Repeat {
                job_id: job_id.clone(),
                sequence: *sequence,
            });
        }
        // Its request is not in the log (an intake rejection keeps only the answer): every
        // request with the key gets that answer, said to be the earlier one.
        Some(KeyOutcome::Rejected(rejection)) => {
            return Err(pb::Rejection {
                code: rejection.code,
                message: bounded(
                    format!(
                        "idempotency key {key:?} was rejected before, and a key keeps its first \
                         answer (submit again with a new key): {}",
                        rejection.message
                    ),
                    MAX_REJECTION_MESSAGE_BYTES,
                ),
            });
        }
        None => {}
    }
    let Some(spec) = &request.spec else {
        return Err(reject(
            RejectionCode::Malformed,
            "submit request has no job spec",
        ));
    };
    if spec.payload.len() > limits.max_payload_bytes {
        return Err(reject(
            RejectionCode::PayloadTooLarge,
            format!(
                "payload is {} bytes, the limit is {}",
                spec.payload.len(),
                limits.max_payload_bytes
            ),
        ));
    }
    for (what, value) in [("user", &spec.user), ("name", &spec.name)] {
        if value.len() > limits.max_label_bytes {
            return Err(reject(
                RejectionCode::InvalidName,
                format!(
                    "{what} is {} bytes, the limit is {}",
                    value.len(),
                    limits.max_label_bytes
                ),
            ));
        }
        // Shown to people as written (queue, explain, tail): a newline or an escape sequence
        // would reach their terminals, as a cancel's reason would.
        if let Some(c) = value.chars().find(|c| c.is_control()) {
            return Err(reject(
                RejectionCode::InvalidName,
                format!("{what} must not contain control characters, found {c:?}"),
            ));
        }
    }
    if !subjects::is_valid_token(&spec.cluster) {
        return Err(reject(
            RejectionCode::InvalidName,
            format!(
                "cluster name {:?} is not valid (letters, digits, _ and -, starting with a letter or digit)",
                spec.cluster
            ),
        ));
    }
    let cluster = state.clusters.get(&spec.cluster);
    let (Some(cluster), Some(budget)) = (cluster, cluster.and_then(|c| c.budget.as_ref())) else {
        return Err(reject(
            RejectionCode::UnknownCluster,
            format!("cluster {:?} has no budget tree or inventory", spec.cluster),
        ));
    };
    if cluster.inventory.nodes().is_empty() {
        return Err(reject(
            RejectionCode::UnknownCluster,
            format!("cluster {:?} has no nodes registered", spec.cluster),
        ));
    }
    if budget.allocation(&spec.allocation).is_none() {
        let detail = if budget.is_inner_account(&spec.allocation) {
            "is an account with children, not an allocation; name one of its leaves"
        } else {
            "is not an allocation in its budget tree"
        };
        return Err(reject(
            RejectionCode::UnknownAllocation,
            format!(
                "allocation {:?} of cluster {:?} {detail}",
                spec.allocation, spec.cluster
            ),
        ));
    }
    let shape = shape::resolve(spec.gpus, spec.nodes, &cluster.inventory).map_err(|e| {
        let code = match e {
            ShapeError::NoGpus { .. } => RejectionCode::InvalidGpus,
            ShapeError::TooManyGpus { .. } => RejectionCode::TooManyGpus,
            ShapeError::Mismatch { .. } => RejectionCode::ShapeMismatch,
        };
        reject(code, e.to_string())
    })?;
    if spec.min_runtime_s < 0 {
        return Err(reject(
            RejectionCode::NegativeMinRuntime,
            format!(
                "minimum runtime {} s is negative (0 means unallocated)",
                spec.min_runtime_s
            ),
        ));
    }
    if spec.min_runtime_s > limits.max_min_runtime_s {
        return Err(reject(
            RejectionCode::MinRuntimeOverCap,
            format!(
                "minimum runtime {} is over the cap of {}",
                seconds(spec.min_runtime_s),
                seconds(limits.max_min_runtime_s)
            ),
        ));
    }
    if spec.time_limit_s < 0 || (spec.time_limit_s > 0 && spec.time_limit_s < spec.min_runtime_s) {
        return Err(reject(
            RejectionCode::InvalidTimeLimit,
            format!(
                "time limit {} s must be 0 (none) or at least the minimum runtime ({} s)",
                spec.time_limit_s, spec.min_runtime_s
            ),
        ));
    }
    Ok(Checked::New(shape))
}

/// The event a new, checked submission appends.
pub fn job_submitted(job_id: &str, request: &pb::SubmitRequest, shape: Shape) -> pb::JobSubmitted {
    pb::JobSubmitted {
        job_id: job_id.to_owned(),
        idempotency_key: request.idempotency_key.clone(),
        spec: request.spec.clone(),
        shape: Some(pb::Shape {
            nodes: shape.nodes,
            gpus_per_node: shape.gpus_per_node,
        }),
    }
}

/// What a cancel request that passed the checks does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelTarget {
    /// Append a cancellation on the job's subject, expecting this last sequence there.
    Cancel {
        /// The job's cluster.
        cluster: String,
        /// Optimistic concurrency: the last sequence on the job's subject.
        expected_last_subject_sequence: u64,
    },
    /// Already cancelled: answer as the first time, write nothing.
    AlreadyCancelled {
        /// Sequence of the cancellation.
        sequence: u64,
    },
}

/// Checks a cancel request.
pub fn check_cancel(
    state: &SubmissionState,
    request: &pb::CancelRequest,
    limits: &Limits,
) -> Result<CancelTarget, pb::Rejection> {
    if request.reason.len() > limits.max_label_bytes
        || request.requested_by.len() > limits.max_label_bytes
    {
        return Err(reject(
            RejectionCode::InvalidName,
            format!(
                "reason and requested_by must be at most {} bytes",
                limits.max_label_bytes
            ),
        ));
    }
    // Both are shown to operators as written: a newline or an escape sequence would reach
    // their terminals.
    if let Some(c) = [&request.reason, &request.requested_by]
        .iter()
        .flat_map(|t| t.chars())
        .find(|c| c.is_control())
    {
        return Err(reject(
            RejectionCode::InvalidName,
            format!("reason and requested_by must not contain control characters, found {c:?}"),
        ));
    }
    let Some(job) = state.jobs.get(&request.job_id) else {
        return Err(reject(
            RejectionCode::UnknownJob,
            format!(
                "no job {:?} is known: never accepted, or it ended more than a day ago",
                request.job_id
            ),
        ));
    };
    match job.status {
        JobStatus::Active => Ok(CancelTarget::Cancel {
            cluster: job.cluster.clone(),
            expected_last_subject_sequence: job.last_subject_sequence,
        }),
        JobStatus::Cancelled { sequence } => Ok(CancelTarget::AlreadyCancelled { sequence }),
        JobStatus::Ended => Err(reject(
            RejectionCode::JobEnded,
            format!("job {} has already ended", request.job_id),
        )),
    }
}
