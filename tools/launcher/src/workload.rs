//! A workload for the demo launcher from a `replay.csv` trace (see `tests/data/traces/`).
//!
//! Rules (documented for the demo; the simulator has its own, fuller ones):
//! - rows with 0 GPUs (CPU-only jobs) are dropped;
//! - the job's tenant (user, else group) is hashed onto the given allocations, so one tenant
//!   always charges the same allocation;
//! - every fifth job of a tenant is unallocated (minimum runtime 0); jobs of at most 2 GPUs that
//!   ran at most 15 minutes are debug jobs with a 10-minute minimum runtime; the rest get
//!   min(duration, 2 h) as minimum runtime;
//! - the payload is `sleep <duration>`, which the demo launcher honours.

use fairshare_events::pb;

pub use fairshare_model::trace::{TraceError, TraceJob, parse_replay};

fn stable_hash(s: &str) -> u64 {
    fairshare_events::headers::content_hash(s.as_bytes())
}

/// The submission for trace job `job` (the `n`-th of its tenant), charging one of
/// `allocations` on `cluster`; `None` for CPU-only rows.
pub fn to_request(
    job: &TraceJob,
    n: u64,
    cluster: &str,
    allocations: &[String],
    key_prefix: &str,
) -> Option<pb::SubmitRequest> {
    if job.gpus <= 0 || allocations.is_empty() {
        return None;
    }
    let allocation = &allocations[(stable_hash(&job.tenant) % allocations.len() as u64) as usize];
    let min_runtime_s = if n % 5 == 4 {
        0
    } else if job.gpus <= 2 && job.duration_s <= 900 {
        600
    } else {
        job.duration_s.clamp(60, 2 * 3600)
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
        assert!(to_request(&job(0, 10), 0, "c", &allocs, "").is_none());
        assert_eq!(
            spec(to_request(&job(1, 300), 0, "c", &allocs, "").unwrap()).min_runtime_s,
            600
        );
        assert_eq!(
            spec(to_request(&job(8, 90_000), 0, "c", &allocs, "").unwrap()).min_runtime_s,
            7200
        );
        assert_eq!(
            spec(to_request(&job(8, 90_000), 4, "c", &allocs, "").unwrap()).min_runtime_s,
            0
        );
        // One tenant, one allocation.
        let a1 = spec(to_request(&job(1, 10), 0, "c", &allocs, "").unwrap()).allocation;
        let a2 = spec(to_request(&job(4, 10), 1, "c", &allocs, "").unwrap()).allocation;
        assert_eq!(a1, a2);
    }
}
