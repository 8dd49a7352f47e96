//! What a simulation replays: jobs arriving at virtual times, and operator actions (budget
//! changes, cordons, maintenance windows) at theirs.
//!
//! A workload comes from a trace through [`crate::mapping`] or from a constructed
//! [`crate::scenarios`] scenario. Every policy of a run replays the same workload; each job's
//! id is derived from its index ([`job_id`]), so the same job has the same id in every log.

use fairshare_events::pb;

/// The longest minimum runtime a job may declare (SPEC section 2), in ms.
pub const MIN_RUNTIME_CAP_MS: i64 = 8 * 3_600_000;
/// Debug jobs: at most this many GPUs...
pub const DEBUG_MAX_GPUS: u32 = 2;
/// ... and a minimum runtime of at most this (SPEC section 1).
pub const DEBUG_MAX_MIN_RUNTIME_MS: i64 = 15 * 60_000;

/// One job of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimJob {
    /// Name from the trace or the scenario; also its idempotency key.
    pub name: String,
    /// Submission time (Unix ms, virtual).
    pub submit_ms: i64,
    /// Run time the job needs when never preempted, in ms.
    pub duration_ms: i64,
    /// Allocation path it charges.
    pub allocation: String,
    /// User who submitted it.
    pub user: String,
    /// GPUs in total (a multiple of the node size when it spans nodes).
    pub gpus: u32,
    /// Declared minimum runtime in ms; 0 = unallocated.
    pub min_runtime_ms: i64,
    /// Whether it resumes from its last checkpoint when requeued after a preemption.
    pub resumable: bool,
    /// Priority within its team (higher first).
    pub priority: i32,
}

/// The class a job's waits are reported under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JobClass {
    /// A few GPUs and a short minimum runtime.
    Debug,
    /// Any other allocated job.
    Allocated,
    /// Minimum runtime 0: free, fills idle GPUs.
    Unallocated,
}

impl JobClass {
    /// The class of a job with these GPUs and minimum runtime.
    pub fn of(gpus: u64, min_runtime_ms: i64) -> JobClass {
        if min_runtime_ms <= 0 {
            JobClass::Unallocated
        } else if gpus <= u64::from(DEBUG_MAX_GPUS) && min_runtime_ms <= DEBUG_MAX_MIN_RUNTIME_MS {
            JobClass::Debug
        } else {
            JobClass::Allocated
        }
    }

    /// Name used in reports.
    pub fn label(self) -> &'static str {
        match self {
            JobClass::Debug => "debug",
            JobClass::Allocated => "allocated",
            JobClass::Unallocated => "unallocated",
        }
    }
}

impl SimJob {
    /// The job's class.
    pub fn class(&self) -> JobClass {
        JobClass::of(u64::from(self.gpus), self.min_runtime_ms)
    }

    /// The submit request a launcher would send for this job on `cluster`.
    pub fn request(&self, cluster: &str) -> pb::SubmitRequest {
        pb::SubmitRequest {
            idempotency_key: self.name.clone(),
            spec: Some(pb::JobSpec {
                cluster: cluster.to_owned(),
                allocation: self.allocation.clone(),
                user: self.user.clone(),
                gpus: i64::from(self.gpus),
                nodes: 0,
                min_runtime_s: self.min_runtime_ms / 1000,
                resumable: self.resumable,
                priority: self.priority,
                time_limit_s: 0,
                payload: Default::default(),
                name: self.name.clone(),
            }),
        }
    }
}

/// An operator or manager action at a virtual time.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A manager replaces the budget tree.
    SetBudget(pb::BudgetTreeSet),
    /// An operator cordons a node for repair.
    Cordon {
        /// The node.
        node: String,
    },
    /// An operator returns a node to service.
    Uncordon {
        /// The node.
        node: String,
    },
    /// An operator schedules maintenance on nodes for `[start_ms, end_ms)`.
    Maintenance {
        /// The nodes.
        nodes: Vec<String>,
        /// Start of the window.
        start_ms: i64,
        /// End of the window.
        end_ms: i64,
    },
}

impl Action {
    /// The log event body this action appends on `cluster`.
    pub fn body(&self, cluster: &str) -> pb::event::Body {
        use pb::event::Body;
        match self {
            Action::SetBudget(b) => Body::BudgetTreeSet(b.clone()),
            Action::Cordon { node } => Body::NodeCordoned(pb::NodeCordoned {
                cluster: cluster.to_owned(),
                node: node.clone(),
                reason: "simulated repair".to_owned(),
            }),
            Action::Uncordon { node } => Body::NodeUncordoned(pb::NodeUncordoned {
                cluster: cluster.to_owned(),
                node: node.clone(),
            }),
            Action::Maintenance {
                nodes,
                start_ms,
                end_ms,
            } => Body::MaintenanceScheduled(pb::MaintenanceScheduled {
                cluster: cluster.to_owned(),
                nodes: nodes.clone(),
                start_ms: *start_ms,
                end_ms: *end_ms,
                reason: "simulated maintenance".to_owned(),
            }),
        }
    }
}

/// An action and when it happens.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedAction {
    /// Virtual time (Unix ms).
    pub at_ms: i64,
    /// What happens.
    pub action: Action,
}

/// Jobs and actions, each sorted by time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workload {
    /// Jobs in submission order (ties keep their input order).
    pub jobs: Vec<SimJob>,
    /// Actions in time order.
    pub actions: Vec<TimedAction>,
}

impl Workload {
    /// A workload from jobs and actions in any order (sorted stably by time).
    pub fn new(mut jobs: Vec<SimJob>, mut actions: Vec<TimedAction>) -> Workload {
        jobs.sort_by_key(|j| j.submit_ms);
        actions.sort_by_key(|a| a.at_ms);
        Workload { jobs, actions }
    }

    /// GPU-ms of work the jobs need.
    pub fn gpu_ms(&self) -> u128 {
        self.jobs
            .iter()
            .map(|j| u128::from(j.gpus) * u128::try_from(j.duration_ms.max(0)).unwrap_or(0))
            .sum()
    }

    /// Demand over supply: GPU time the jobs need over the GPU time `setup`'s cluster offers
    /// from the epoch to its end (2-3 for the clusters this product is built for).
    pub fn demand_over_supply(&self, setup: &crate::setup::Setup) -> f64 {
        let span = u128::try_from(setup.end_ms - crate::setup::EPOCH_MS).unwrap_or(0);
        let supply = u128::from(setup.total_gpus()) * span;
        self.gpu_ms() as f64 / supply.max(1) as f64
    }
}

/// The id of the `index`-th job of a workload: a UUIDv7 whose time is the submission time
/// and whose random bits are the index, so ids sort like submissions and are the same in
/// every policy's log and every run.
pub fn job_id(index: usize, submit_ms: i64) -> String {
    let ms = u64::try_from(submit_ms).unwrap_or(0);
    let mut counter = [0u8; 10];
    counter[2..].copy_from_slice(&(index as u64).to_be_bytes());
    uuid::Builder::from_unix_timestamp_millis(ms, &counter)
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(JobClass::of(1, 0), JobClass::Unallocated);
        assert_eq!(JobClass::of(2, 15 * 60_000), JobClass::Debug);
        assert_eq!(JobClass::of(3, 60_000), JobClass::Allocated);
        assert_eq!(JobClass::of(1, 15 * 60_000 + 1), JobClass::Allocated);
    }

    #[test]
    fn job_ids_are_stable_and_ordered() {
        assert_eq!(job_id(7, 1_000), job_id(7, 1_000));
        assert_ne!(job_id(7, 1_000), job_id(8, 1_000));
        assert!(job_id(7, 1_000) < job_id(8, 1_000));
        assert!(job_id(9, 1_000) < job_id(0, 2_000));
        assert!(uuid::Uuid::parse_str(&job_id(1, 5)).is_ok());
    }
}
