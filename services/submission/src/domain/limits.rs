//! The configurable limits submissions are checked against.

/// Limits a submission must respect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Longest minimum runtime accepted, in seconds (the contract's cap; default 8 h).
    pub max_min_runtime_s: i64,
    /// Largest launcher payload accepted, in bytes.
    pub max_payload_bytes: usize,
    /// Longest idempotency key accepted, in bytes.
    pub max_idempotency_key_bytes: usize,
    /// Longest user, job name or reason accepted, in bytes.
    pub max_label_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_min_runtime_s: 8 * 3600,
            max_payload_bytes: 64 * 1024,
            max_idempotency_key_bytes: 256,
            max_label_bytes: 256,
        }
    }
}
