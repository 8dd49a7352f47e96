//! A workload for the demo launcher from a `replay.csv` trace (see `tests/data/traces/`).
//!
//! Rules (documented for the demo; the simulator has its own, fuller ones):
//! - rows with 0 GPUs (CPU-only jobs) are dropped;
//! - the job's tenant (user, else group) is hashed onto the given allocations, so one tenant
//!   always charges the same allocation;
//! - every fifth job of a tenant is unallocated (minimum runtime 0); jobs of at most 2 GPUs that
//!   ran at most 15 minutes are debug jobs with a 10-minute minimum runtime; the rest get their
//!   duration clamped to [1 min, 30 min] (the simulator's default: the checkpoint interval);
//! - minimum runtimes are in job time, so they are divided by the time scale like durations
//!   (at least 1 s): the services protect a job for clock time, and at 60x a 30-minute
//!   protection unscaled would outlast the job, and nothing would ever be rotated. (So every
//!   scaled minimum runtime is under the services' 15-minute debug limit: at 60x, every
//!   allocated job of 1-2 GPUs is a debug job to the services, not only the ones below.)
//! - the payload is `sleep <duration>`, which the demo launcher honours.

use fairshare_events::pb;

pub use fairshare_model::trace::{TraceError, TraceJob, parse_replay};

/// When a job `since_first_s` trace seconds after the trace's first arrives, with arrivals
/// `arrival_scale` times faster than the clock (0 counts as 1).
pub fn arrival_offset(since_first_s: i64, arrival_scale: u32) -> std::time::Duration {
    let ms = u64::try_from(since_first_s)
        .unwrap_or(0)
        .saturating_mul(1000);
    std::time::Duration::from_millis(ms / u64::from(arrival_scale.max(1)))
}

fn stable_hash(s: &str) -> u64 {
    fairshare_events::headers::content_hash(s.as_bytes())
}

/// The submission for trace job `job` (the `n`-th of its tenant), charging one of
/// `allocations` on `cluster`, with job time running `time_scale` times faster than the clock;
/// `None` for CPU-only rows.
pub fn to_request(
    job: &TraceJob,
    n: u64,
    cluster: &str,
    allocations: &[String],
    key_prefix: &str,
    time_scale: u32,
) -> Option<pb::SubmitRequest> {
    if job.gpus <= 0 || allocations.is_empty() {
        return None;
    }
    let allocation = &allocations[(stable_hash(&job.tenant) % allocations.len() as u64) as usize];
    let min_runtime_in_job_time = if n % 5 == 4 {
        0
    } else if job.gpus <= 2 && job.duration_s <= 900 {
        600
    } else {
        job.duration_s.clamp(60, 1800)
    };
    let min_runtime_s = if min_runtime_in_job_time == 0 {
        0
    } else {
        (min_runtime_in_job_time / i64::from(time_scale.max(1))).max(1)
    };
    Some(pb::SubmitRequest {
        idempotency_key: format!("{key_prefix}{}", job.id),
        spec: Some(pb::JobSpec {
            cluster: cluster.to_owned(),
            allocation: allocation.clone(),
            user: job.tenant.clone(),
            gpus: job.gpus,
            nodes: 0,
            min_runtime_s,
            resumable: true,
            priority: 0,
            time_limit_s: 0,
            payload: format!("sleep {}", job.duration_s.max(1))
                .into_bytes()
                .into(),
            name: job.id.clone(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_follow_their_own_scale() {
        use std::time::Duration;
        // Ten trace hours: 10 min at 60x, 1 min at 600x; sub-second offsets are kept.
        assert_eq!(arrival_offset(36_000, 60), Duration::from_secs(600));
        assert_eq!(arrival_offset(36_000, 600), Duration::from_secs(60));
        assert_eq!(arrival_offset(1, 600), Duration::from_millis(1));
        // Out-of-order rows (before the first) and a zero scale do not panic.
        assert_eq!(arrival_offset(-5, 600), Duration::ZERO);
        assert_eq!(arrival_offset(7, 0), Duration::from_secs(7));
    }

    #[test]
    fn mapping_rules() {
        let allocs = vec!["a".to_owned(), "b".to_owned()];
        let job = |gpus, duration_s| TraceJob {
            id: "j".into(),
            submit_s: 0,
            duration_s,
            gpus,
            tenant: "u".into(),
        };
        let spec = |r: pb::SubmitRequest| r.spec.unwrap();
        assert!(to_request(&job(0, 10), 0, "c", &allocs, "", 1).is_none());
        assert_eq!(
            spec(to_request(&job(1, 300), 0, "c", &allocs, "", 1).unwrap()).min_runtime_s,
            600
        );
        assert_eq!(
            spec(to_request(&job(8, 90_000), 0, "c", &allocs, "", 1).unwrap()).min_runtime_s,
            1800
        );
        // At 60x, protections shrink with the jobs: 10 min of job time is 10 s of clock time,
        // and none falls to 0 (which would make the job unallocated).
        let at_60x = |gpus, duration_s| {
            spec(to_request(&job(gpus, duration_s), 0, "c", &allocs, "", 60).unwrap()).min_runtime_s
        };
        assert_eq!(at_60x(1, 300), 10);
        assert_eq!(at_60x(8, 90_000), 30);
        assert_eq!(at_60x(8, 61), 1);
        assert_eq!(
            spec(to_request(&job(8, 90_000), 4, "c", &allocs, "", 1).unwrap()).min_runtime_s,
            0
        );
        // One tenant, one allocation.
        let a1 = spec(to_request(&job(1, 10), 0, "c", &allocs, "", 1).unwrap()).allocation;
        let a2 = spec(to_request(&job(4, 10), 1, "c", &allocs, "", 1).unwrap()).allocation;
        assert_eq!(a1, a2);
    }
}
