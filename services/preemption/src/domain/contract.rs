//! The time-slicing contract (SPEC sections 1 and 2): what a job's minimum runtime protects,
//! what counts as a debug job, and what a preemption throws away.
//!
//! Place in the flow: every rule that decides whether a running job may be ordered off
//! ([`crate::domain::victims`] for fair share, [`crate::domain::drain`] for cordons and
//! maintenance) asks these functions, so the contract is stated once.
//!
//! - A minimum runtime of 0 means unallocated: charged to no budget, never protected.
//! - Any other minimum runtime protects the job from `start` to `start + min(min_runtime,
//!   cap)`; the cap is [`Config::min_runtime_cap_ms`] (8 h by default).
//! - A debug job uses at most 2 GPUs and has a minimum runtime in `(0, 15 min]`: the decision
//!   service's definition ([`fairshare_decision::domain::debug`]), which its debug allowance
//!   and this service's walk share, so there is one.
//! - Lost work of a preemption is `gpus x time since the last checkpoint`, checkpoints falling
//!   every [`Config::checkpoint_interval_ms`] of run; a job that is not resumable restarts from
//!   nothing, so it loses its whole run.

use fairshare_decision::domain::debug;

use super::config::Config;

/// Whether a job with this minimum runtime is unallocated (minimum runtime 0).
pub fn is_unallocated(min_runtime_ms: i64) -> bool {
    min_runtime_ms <= 0
}

/// The protection a minimum runtime actually buys: capped by policy, never negative.
pub fn effective_min_runtime_ms(min_runtime_ms: i64, config: &Config) -> i64 {
    min_runtime_ms.clamp(0, config.min_runtime_cap_ms.max(0))
}

/// The end of a job's protection: `start + effective minimum runtime` (`start` for
/// unallocated work, which is never protected).
pub fn protected_until_ms(start_ms: i64, min_runtime_ms: i64, config: &Config) -> i64 {
    start_ms.saturating_add(effective_min_runtime_ms(min_runtime_ms, config))
}

/// Whether a running job may not be ordered off for fair share at `now_ms`.
pub fn is_protected(start_ms: i64, min_runtime_ms: i64, now_ms: i64, config: &Config) -> bool {
    !is_unallocated(min_runtime_ms) && now_ms < protected_until_ms(start_ms, min_runtime_ms, config)
}

/// Whether a job of `gpus` GPUs and this minimum runtime is a debug job: few GPUs, a short
/// minimum runtime, and allocated (minimum runtime 0 is unallocated work, not debugging).
pub fn is_debug(gpus: u64, min_runtime_ms: i64) -> bool {
    gpus > 0 && debug::is_debug(gpus, min_runtime_ms, debug::DEBUG_MAX_GPUS)
}

/// GPU-ms a preemption at `now_ms` throws away for a job of `gpus` GPUs that has run since
/// `start_ms` (0 if it has not started: nothing ran yet).
pub fn lost_work_gpu_ms(
    gpus: u64,
    start_ms: i64,
    started: bool,
    resumable: bool,
    now_ms: i64,
    config: &Config,
) -> u128 {
    if !started {
        return 0;
    }
    let ran = now_ms.saturating_sub(start_ms).max(0);
    let since_checkpoint = if resumable && config.checkpoint_interval_ms > 0 {
        ran % config.checkpoint_interval_ms
    } else {
        ran
    };
    u128::from(gpus) * u128::try_from(since_checkpoint).unwrap_or(0)
}

/// When a job that has run since `start_ms` next checkpoints after `now_ms`, after which a
/// preemption throws less of its work away; `None` if that never helps (not started, not
/// resumable, or no checkpoint interval).
pub fn next_checkpoint_ms(
    start_ms: i64,
    started: bool,
    resumable: bool,
    now_ms: i64,
    config: &Config,
) -> Option<i64> {
    let interval = config.checkpoint_interval_ms;
    if !started || !resumable || interval <= 0 {
        return None;
    }
    let ran = now_ms.saturating_sub(start_ms).max(0);
    let done = ran / interval;
    Some(start_ms.saturating_add(done.saturating_add(1).saturating_mul(interval)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;

    #[test]
    fn protection_is_capped_and_unallocated_is_never_protected() {
        let c = Config::default();
        assert_eq!(effective_min_runtime_ms(12 * HOUR, &c), 8 * HOUR);
        assert_eq!(effective_min_runtime_ms(2 * HOUR, &c), 2 * HOUR);
        assert_eq!(protected_until_ms(1_000, 12 * HOUR, &c), 1_000 + 8 * HOUR);
        assert!(is_protected(0, 12 * HOUR, 8 * HOUR - 1, &c));
        assert!(!is_protected(0, 12 * HOUR, 8 * HOUR, &c));
        assert!(!is_protected(0, 0, 0, &c));
        let short = Config {
            min_runtime_cap_ms: HOUR,
            ..c
        };
        assert!(!is_protected(0, 2 * HOUR, HOUR, &short));
    }

    #[test]
    fn the_next_checkpoint_follows_the_run_and_needs_a_resumable_started_job() {
        let c = Config::default();
        let start = 5 * MIN;
        // Checkpoints at 30, 60, ... min of run: at 35 min of run the next is at 60.
        assert_eq!(
            next_checkpoint_ms(start, true, true, start + 35 * MIN, &c),
            Some(start + HOUR)
        );
        // At a checkpoint itself, the next one.
        assert_eq!(
            next_checkpoint_ms(start, true, true, start + 30 * MIN, &c),
            Some(start + HOUR)
        );
        assert_eq!(
            next_checkpoint_ms(start, true, true, start, &c),
            Some(start + 30 * MIN)
        );
        assert_eq!(
            next_checkpoint_ms(start, false, true, start + MIN, &c),
            None
        );
        assert_eq!(
            next_checkpoint_ms(start, true, false, start + MIN, &c),
            None
        );
        let none = Config {
            checkpoint_interval_ms: 0,
            ..c
        };
        assert_eq!(
            next_checkpoint_ms(start, true, true, start + MIN, &none),
            None
        );
    }

    #[test]
    fn debug_jobs() {
        assert!(is_debug(1, 15 * MIN));
        assert!(is_debug(2, MIN));
        assert!(!is_debug(3, 15 * MIN));
        assert!(!is_debug(2, 15 * MIN + 1));
        assert!(!is_debug(1, 0), "unallocated work is not debug work");
        assert!(!is_debug(0, MIN));
    }

    #[test]
    fn lost_work_counts_since_the_last_checkpoint() {
        let c = Config::default();
        // 4 GPUs, ran 1 h 10 min: checkpoints at 30 and 60 min, 10 min lost.
        assert_eq!(
            lost_work_gpu_ms(4, 0, true, true, 70 * MIN, &c),
            4 * 10 * MIN as u128
        );
        // Exactly on a checkpoint: nothing lost.
        assert_eq!(lost_work_gpu_ms(4, 0, true, true, 60 * MIN, &c), 0);
        // Not resumable: the whole run.
        assert_eq!(
            lost_work_gpu_ms(4, 0, true, false, 70 * MIN, &c),
            4 * 70 * MIN as u128
        );
        // Not started yet.
        assert_eq!(lost_work_gpu_ms(4, 0, false, false, 70 * MIN, &c), 0);
    }
}
