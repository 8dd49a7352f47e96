//! The preemption service's tunables, checked once at start-up.
//!
//! Place in the flow: the shell builds one [`Config`] (defaults or flags), calls
//! [`Config::validate`], and passes it to every [`crate::domain::decide_preemptions`] call. The
//! values are policy, not state: two replays with the same config and the same log produce the
//! same events.

const SECOND: i64 = 1_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;

/// Policy knobs of the minimum-runtime contract, grace, lost work and hysteresis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Longest minimum runtime that is honoured (SPEC: 8 h). Submission rejects longer
    /// requests; the cap is applied here again so an old or foreign event can never buy more
    /// protection than the policy allows.
    pub min_runtime_cap_ms: i64,
    /// Time between a `PreemptionOrdered` and the moment the job counts as killed.
    /// The default, 30 s, is the SPEC's debug p90 wait target: a debug job that needs a victim
    /// waits at most about one grace period for it.
    pub grace_ms: i64,
    /// Jobs are assumed to checkpoint every this much of run (SPEC section 6: 30 min); work
    /// since the last checkpoint is what a preemption throws away.
    pub checkpoint_interval_ms: i64,
    /// Hysteresis, in per mille: an allocated victim is taken only if, at the level of the
    /// budget tree where the waiter's and the victim's paths part, the victim's side's usage
    /// ratio is at least `(1 + hysteresis_permille / 1000)` times the waiter's side's ratio
    /// *after* the waiter is charged its GPUs x minimum runtime. Default 100 (10 %): rank
    /// changes of a few per cent (a snapshot arriving, a job ending) do not rotate work.
    pub hysteresis_permille: u32,
    /// Whether a blocked single-node waiter (or one behind a blocked job) may have jobs moved
    /// off a node into free GPUs elsewhere so it fits there ([`crate::domain::pack`]). On by default; off only to
    /// measure what packing moves are worth.
    pub packing: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_runtime_cap_ms: 8 * HOUR,
            grace_ms: 30 * SECOND,
            checkpoint_interval_ms: 30 * MINUTE,
            hysteresis_permille: 100,
            packing: true,
        }
    }
}

/// A configuration value the service cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A duration that must be positive is not.
    #[error("{name} must be positive (got {value} ms)")]
    NotPositive {
        /// The field.
        name: &'static str,
        /// Its value.
        value: i64,
    },
    /// The grace period is negative.
    #[error("grace_ms must not be negative (got {0} ms)")]
    NegativeGrace(i64),
}

impl Config {
    /// Checks that every duration makes sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, value) in [
            ("min_runtime_cap_ms", self.min_runtime_cap_ms),
            ("checkpoint_interval_ms", self.checkpoint_interval_ms),
        ] {
            if value <= 0 {
                return Err(ConfigError::NotPositive { name, value });
            }
        }
        if self.grace_ms < 0 {
            return Err(ConfigError::NegativeGrace(self.grace_ms));
        }
        Ok(())
    }
}
