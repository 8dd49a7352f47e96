//! What a simulation replays: jobs arriving at virtual times, and operator actions (budget
//! changes, cordons, maintenance windows) at theirs.
//!
//! A workload comes from a trace through [`crate::mapping`] or from a constructed
//! [`crate::scenarios`] scenario. Every policy of a run replays the same workload; each job's
//! id is derived from its index ([`job_id`]), so the same job has the same id in every log.

use std::collections::BTreeMap;

use fairshare_events::pb;
use fairshare_model::budget::BudgetTree;

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

/// Jobs the submission checks refuse ([`Workload::refused`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refused {
    /// Of no leaf allocation, or of GPUs no shape on the nodes holds (more than the cluster,
    /// or more than a node and not whole nodes): no policy runs them.
    pub by_all: u64,
    /// Refused for what only the submission service checks (a label, key or minimum runtime
    /// over its limits, a repeated key): the baselines run them, so the runs would compare
    /// different workloads.
    pub by_fairshare_only: u64,
    /// The first of those: the job's name and why the submission checks refuse it.
    pub first_by_fairshare_only: Option<(String, String)>,
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

    /// How many jobs the submission checks refuse, checked as the fairshare run checks them:
    /// in submission order, against `setup`'s tree and nodes with the workload's earlier
    /// actions applied, each accepted job remembered (a repeated key is refused).
    pub fn refused(
        &self,
        setup: &crate::setup::Setup,
        limits: &fairshare_submission::domain::Limits,
    ) -> Refused {
        use fairshare_events::pb::RejectionCode;
        use fairshare_submission::domain::{
            Checked, SubmissionState, check_submission, job_submitted,
        };
        let mut state = SubmissionState::default();
        let mut sequence = 0;
        // Every event is folded at the epoch, whatever its time. The checks do not read the
        // log's time; what it moves is the state's forgetting, and none of these jobs ends,
        // so no key is ever forgotten either way: at their own times, each live job's key
        // would only be put off by a day again and again (a fifth of the time of a 30-day
        // trace run's command line, before the simulation starts).
        let mut fold = |state: &mut SubmissionState, body: pb::event::Body| {
            sequence += 1;
            let event = pb::Event {
                at_ms: crate::setup::EPOCH_MS,
                body: Some(body),
            };
            state.apply(sequence, &event);
        };
        for event in setup.initial_events(crate::setup::EPOCH_MS) {
            if let Some(body) = event.body {
                fold(&mut state, body);
            }
        }
        let mut actions = self.actions.iter().peekable();
        let mut refused = Refused::default();
        for (index, job) in self.jobs.iter().enumerate() {
            while let Some(a) = actions.next_if(|a| a.at_ms < job.submit_ms) {
                fold(&mut state, a.action.body(&setup.cluster));
            }
            let request = job.request(&setup.cluster);
            match check_submission(&state, &request, limits) {
                Ok(Checked::New(shape)) => {
                    let body = job_submitted(&job_id(index, job.submit_ms), &request, shape);
                    fold(&mut state, pb::event::Body::JobSubmitted(body));
                }
                // What the baselines check too (`baseline::replay`).
                Err(r)
                    if [
                        RejectionCode::UnknownAllocation,
                        RejectionCode::InvalidGpus,
                        RejectionCode::TooManyGpus,
                        RejectionCode::ShapeMismatch,
                    ]
                    .contains(&r.code()) =>
                {
                    refused.by_all += 1;
                }
                other => {
                    refused.by_fairshare_only += 1;
                    if refused.first_by_fairshare_only.is_none() {
                        let why = match other {
                            Err(r) => r.message,
                            _ => "its name, the idempotency key, is a repeat".to_owned(),
                        };
                        refused.first_by_fairshare_only = Some((job.name.clone(), why));
                    }
                }
            }
        }
        refused
    }

    /// GPU-ms of work the jobs need.
    pub fn gpu_ms(&self) -> u128 {
        self.jobs
            .iter()
            .map(|j| u128::from(j.gpus) * u128::try_from(j.duration_ms.max(0)).unwrap_or(0))
            .sum()
    }

    /// Demand over supply: GPU time the jobs could run before `setup`'s run ends (each from its
    /// submission, cut at the end) over the GPU time its cluster offers from the epoch to the
    /// end (2-3 for the clusters this product is built for). A job submitted near the end
    /// of a long-running trace asks for days the run does not have: counted whole (as
    /// [`Self::whole_demand_over_supply`] does), Helios's whole trace reads 14% more
    /// oversubscribed than the run is, and a one-day span of it four times.
    pub fn demand_over_supply(&self, setup: &crate::setup::Setup) -> f64 {
        let in_run: u128 = self
            .jobs
            .iter()
            .map(|j| {
                let left = setup.end_ms.saturating_sub(j.submit_ms).max(0);
                let ms = j.duration_ms.clamp(0, left);
                u128::from(j.gpus) * u128::try_from(ms).unwrap_or(0)
            })
            .sum();
        in_run as f64 / Self::supply_gpu_ms(setup).max(1) as f64
    }

    /// Demand over supply with every job's whole run counted, however far past the run's end
    /// it would go (the report gives it beside [`Self::demand_over_supply`]).
    pub fn whole_demand_over_supply(&self, setup: &crate::setup::Setup) -> f64 {
        self.gpu_ms() as f64 / Self::supply_gpu_ms(setup).max(1) as f64
    }

    /// GPU time `setup`'s cluster offers from the epoch to the run's end.
    fn supply_gpu_ms(setup: &crate::setup::Setup) -> u128 {
        let span = u128::try_from(setup.end_ms - crate::setup::EPOCH_MS).unwrap_or(0);
        u128::from(setup.total_gpus()) * span
    }

    /// The share (0 to 1) of allocated GPU time (GPUs x run time before the run ends, minimum
    /// runtime > 0) that is in jobs needing more GPUs than their allocation's fraction of
    /// `setup`'s cluster. While such a job runs, its allocation gets more than its hourly owed
    /// time and the rest of the cluster less than theirs, whatever the policy: the hourly owed
    /// metric cannot reach 100% on a workload where this is large. Jobs of allocations outside
    /// the tree count as oversized (their fraction is 0).
    pub fn oversized_share(&self, setup: &crate::setup::Setup) -> f64 {
        let (oversized, allocated) = self
            .oversized_split(setup)
            .values()
            .fold((0u128, 0u128), |(o, a), (jo, ja)| (o + jo, a + ja));
        oversized as f64 / allocated.max(1) as f64
    }

    /// [`Self::oversized_share`] of each allocation's own GPU time, by allocation path: why an
    /// allocation misses its hourly owed time under any policy (its work comes in jobs bigger
    /// than its share, which overshoot its owed time while they run and miss it while they
    /// wait).
    pub fn oversized_by_allocation(&self, setup: &crate::setup::Setup) -> BTreeMap<String, f64> {
        self.oversized_split(setup)
            .into_iter()
            .map(|(allocation, (oversized, allocated))| {
                (allocation, oversized as f64 / allocated.max(1) as f64)
            })
            .collect()
    }

    /// Per allocation: allocated GPU-ms in oversized jobs, and in all its jobs.
    ///
    /// Each job is measured against the tree in force when it was submitted: the setup's, or
    /// the last one a budget change before then brought (a tree the services would refuse
    /// changes nothing, as there).
    fn oversized_split(&self, setup: &crate::setup::Setup) -> BTreeMap<String, (u128, u128)> {
        let total_gpus = u128::from(setup.total_gpus());
        let changes: Vec<(i64, BudgetTree)> = self
            .actions
            .iter()
            .filter_map(|a| match &a.action {
                Action::SetBudget(set) => BudgetTree::from_accounts(&set.accounts)
                    .ok()
                    .map(|tree| (a.at_ms, tree)),
                _ => None,
            })
            .collect();
        let mut split: BTreeMap<String, (u128, u128)> = BTreeMap::new();
        for job in self.jobs.iter().filter(|j| j.min_runtime_ms > 0) {
            // What it could run before the run ends, as the oversubscription counts it.
            let left = setup.end_ms.saturating_sub(job.submit_ms).max(0);
            let ms = job.duration_ms.clamp(0, left);
            let gpu_ms = u128::from(job.gpus) * u128::try_from(ms).unwrap_or(0);
            // Actions are in time order, and a budget change at the submission's instant is
            // folded before it (the engine applies actions first).
            let tree = changes
                .iter()
                .take_while(|(at, _)| *at <= job.submit_ms)
                .last()
                .map_or(&setup.tree, |(_, tree)| tree);
            let fits_share = tree.allocation(&job.allocation).is_some_and(|id| {
                let f = tree.fraction(id);
                u128::from(job.gpus).saturating_mul(f.den) <= f.num.saturating_mul(total_gpus)
            });
            let entry = split.entry(job.allocation.clone()).or_default();
            entry.1 += gpu_ms;
            if !fits_share {
                entry.0 += gpu_ms;
            }
        }
        split
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

    const H: i64 = 3_600_000;

    /// 16 GPUs on two 8-GPU nodes, for an hour: a's share is 12 GPUs, b's 4.
    fn two_nodes_a_and_b() -> crate::setup::Setup {
        use crate::scenarios::flat_budget;
        use crate::setup::{EPOCH_MS, Setup};
        Setup::new(
            flat_budget("sim", &[("a", 75), ("b", 25)]),
            Setup::uniform_nodes("node", 2, 8),
            EPOCH_MS + H,
        )
        .expect("a valid setup")
    }

    #[test]
    fn oversized_share_counts_allocated_jobs_bigger_than_their_allocation_share() {
        use crate::scenarios::job;
        let setup = two_nodes_a_and_b();
        let jobs = vec![
            job("fits".into(), 0, "a", 8, H, H),
            job("too-big".into(), 0, "a", 16, H, H),
            job("exactly".into(), 0, "b", 4, 2 * H, H),
            job("b-too-big".into(), 0, "b", 8, H, H),
            job("free".into(), 0, "a", 16, 10 * H, 0),
            job("ghost".into(), 0, "gone", 1, H, H),
        ];
        let workload = Workload::new(jobs, Vec::new());
        let share = workload.oversized_share(&setup);
        // Allocated, up to the run's end (an hour): 8 + 16 + 4 + 8 + 1 = 37 GPU-h ("exactly"
        // runs 2 h, half of it after the end); oversized: 16 + 8 + 1 = 25 (the unallocated job
        // counts in neither).
        assert!((share - 25.0 / 37.0).abs() < 1e-12, "{share}");
        // a: 16 of 24 GPU-h; b: 8 of 12; the allocation outside the tree: all of it.
        let by = workload.oversized_by_allocation(&setup);
        let expected: Vec<(&str, f64)> = vec![("a", 16.0 / 24.0), ("b", 8.0 / 12.0), ("gone", 1.0)];
        assert_eq!(by.len(), expected.len(), "{by:?}");
        for (allocation, share) in expected {
            assert!(
                (by[allocation] - share).abs() < 1e-12,
                "{allocation}: {by:?}"
            );
        }
    }

    /// After a budget change, jobs are measured against the new tree.
    #[test]
    fn oversized_share_follows_the_tree_in_force_at_each_submission() {
        use crate::scenarios::{flat_budget, job};
        let setup = two_nodes_a_and_b();
        // a: 12 GPUs of 16 until the change at half an hour, then 4 (the run lasts an hour).
        let jobs = vec![
            job("before".into(), 0, "a", 8, H / 4, H / 4),
            job("after".into(), 3 * H / 4, "a", 8, H / 4, H / 4),
        ];
        let change = TimedAction {
            at_ms: crate::setup::EPOCH_MS + H / 2,
            action: Action::SetBudget(flat_budget("sim", &[("a", 25), ("b", 75)])),
        };
        let workload = Workload::new(jobs, vec![change]);
        let by = workload.oversized_by_allocation(&setup);
        assert!((by["a"] - 0.5).abs() < 1e-12, "{by:?}");
    }

    /// Oversubscription counts what the jobs could run before the run ends; the whole-run
    /// figure counts them to their ends.
    #[test]
    fn oversubscription_counts_only_what_could_run_before_the_end() {
        use crate::scenarios::job;
        // 16 GPUs for an hour: 16 GPU-h offered.
        let setup = two_nodes_a_and_b();
        let jobs = vec![
            // 8 GPU-h, all within the hour.
            job("inside".into(), 0, "a", 8, H, H),
            // Submitted half way, asks 16 GPUs for 2 h: 8 GPU-h before the end, 32 in all.
            job("late".into(), H / 2, "b", 16, 2 * H, H),
            // Submitted at the end: nothing before it.
            job("at-end".into(), H, "a", 1, H, H),
        ];
        let workload = Workload::new(jobs, Vec::new());
        let in_run = workload.demand_over_supply(&setup);
        assert!((in_run - 16.0 / 16.0).abs() < 1e-12, "{in_run}");
        let whole = workload.whole_demand_over_supply(&setup);
        assert!((whole - 41.0 / 16.0).abs() < 1e-12, "{whole}");
    }

    /// The count the report gives is what the fairshare run's submission checks refuse.
    #[test]
    fn refused_counts_what_the_submission_checks_refuse() {
        use crate::engine::{self, EngineConfig};
        use crate::scenarios::job;
        let setup = two_nodes_a_and_b();
        let jobs = vec![
            job("fits".into(), 0, "a", 8, H / 2, H / 2),
            job("whole-cluster".into(), 0, "b", 16, H / 2, H / 2),
            job("bigger-than-the-cluster".into(), 0, "a", 24, H / 2, H / 2),
            job(
                "more-than-a-node-not-whole-nodes".into(),
                0,
                "a",
                12,
                H / 2,
                H / 2,
            ),
            job("ghost".into(), 0, "gone", 1, H / 2, H / 2),
        ];
        let workload = Workload::new(jobs, Vec::new());
        let config = EngineConfig::default();
        let refused = workload.refused(&setup, &config.limits);
        assert_eq!(refused.by_all, 3);
        assert_eq!(refused.by_fairshare_only, 0);
        // A repeated name is a repeated idempotency key: refused by the fairshare run only.
        let twice = Workload::new(
            vec![
                job("same".into(), 0, "a", 1, H / 2, H / 2),
                job("same".into(), 1, "a", 1, H / 2, H / 2),
            ],
            Vec::new(),
        );
        let refused = twice.refused(&setup, &config.limits);
        assert_eq!((refused.by_all, refused.by_fairshare_only), (0, 1));
        let (first, why) = refused.first_by_fairshare_only.unwrap();
        assert_eq!(first, "same");
        assert!(why.contains("repeat"), "{why}");
        // One over the submission limits is named with the check's own words.
        let long = Workload::new(
            vec![job("x".repeat(300), 0, "a", 1, H / 2, H / 2)],
            Vec::new(),
        );
        let (first, why) = long
            .refused(&setup, &config.limits)
            .first_by_fairshare_only
            .unwrap();
        assert_eq!(first.len(), 300);
        assert!(why.contains("256"), "{why}");
        assert_eq!(
            engine::run(&setup, &twice, &config, |_| {}).stats.rejected,
            1
        );
        let run = engine::run(&setup, &workload, &config, |_| {});
        assert_eq!(run.stats.rejected, 3);
        // The baselines run without the same jobs.
        let log = crate::baseline::run(crate::baseline::Baseline::Fifo, &setup, &workload);
        let submitted = log
            .iter()
            .filter(|e| matches!(e.body, Some(pb::event::Body::JobSubmitted(_))))
            .count();
        assert_eq!(submitted, 2);
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
