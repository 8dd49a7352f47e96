//! The decision state: one cluster's queue, nodes, running work, budget tree and window usage,
//! folded from the event log.
//!
//! Place in the flow: the shell reads `FAIRSHARE_EVENTS` in order and hands every event with its
//! stream sequence to [`DecisionState::apply`]. The state is a pure function of the events
//! applied (redeliveries at or below the last applied sequence change nothing), so a rebuild from
//! the log equals the state the service held. [`crate::domain::decide()`] only reads it.
//!
//! Job transitions this fold follows (anything else is refused with an [`Ignored`] reason and
//! changes nothing but the last applied sequence):
//!
//! | event                                     | from                      | to          |
//! |-------------------------------------------|---------------------------|-------------|
//! | `JobSubmitted` (this cluster, new id)     | (unknown)                 | queued      |
//! | `JobPlaced`                               | queued                    | placed      |
//! | `JobStarted`                              | placed                    | placed (start time refined) |
//! | `PreemptionOrdered`                       | placed                    | placed (leaves by the grace deadline) |
//! | `JobPreempted`                            | placed                    | preempted if resumable, else forgotten |
//! | `JobRequeued`                             | preempted                 | queued (original submit time) |
//! | `JobFinished`, `JobFailed`, `JobCancelled`| queued, placed, preempted | forgotten   |
//!
//! Job events carry no cluster: they are routed by job id, so events of other clusters' jobs are
//! simply "unknown job" here, which is what makes one instance per cluster work.
//!
//! Besides the plain tables the fold keeps three indexes so a cycle never scans or sorts the
//! whole queue: per allocation, its queued jobs already in within-team order (priority, submit
//! time, id), in a [`SortedChunks`] so the cycle's walk over them streams through memory; per node, the GPUs held and by whom with the time each holding can be reclaimed;
//! per allocation, its placed allocated jobs (for charging work not yet in the usage snapshot).
//! Each holding also carries a copy of the facts about its job that preemption rules read
//! ([`Holder`]), so a pass over every running job never searches the job table.
//!
//! When a job with a preemption order leaves its nodes while the job the order named still
//! waits, the GPUs it freed are promised to that job ([`super::promise`]).

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;

use fairshare_events::pb::{self, event::Body};
use fairshare_model::budget::{AccountId, BudgetError, BudgetTree};
use fairshare_model::duration::exact_words;
use fairshare_model::inventory::Inventory;
use fairshare_model::logtime::effective_at;
use fairshare_model::shape::{self, Shape};
use serde::{Deserialize, Serialize};

use super::debug;
use super::flat::FlatMap;
use super::flight::FlightIndex;
use super::hourly::{HourMeter, OwedBefore};
use super::nodes::NodeIndex;
use super::persist;
use super::promise::Promise;
use super::queue::SortedChunks;
use super::rank;

/// Why an event changed nothing (beyond advancing the last applied sequence).
///
/// None of these is a failure of the service: the log is the truth, and an event this state
/// cannot use is skipped the same way on every replay. The shell logs them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    /// A redelivery: the sequence is at or below the last one applied.
    #[error("sequence {sequence} is at or below the last applied sequence {last_applied}")]
    Duplicate {
        /// The sequence offered.
        sequence: u64,
        /// The last sequence applied.
        last_applied: u64,
    },
    /// The event has no body this version knows.
    #[error("event has no body")]
    NoBody,
    /// The event names another cluster.
    #[error("event belongs to cluster {cluster:?}")]
    OtherCluster {
        /// The cluster the event names.
        cluster: String,
    },
    /// A job event for a job this state does not hold (another cluster's, or already ended).
    #[error("no live job {job_id:?} in this cluster")]
    UnknownJob {
        /// The job id.
        job_id: String,
    },
    /// A second submission with an id already known; the first one stands.
    #[error("job {job_id:?} was already submitted")]
    DuplicateJob {
        /// The job id.
        job_id: String,
    },
    /// A job event that does not apply to the job's current status.
    #[error("{event} does not apply to job {job_id:?} while it is {status}")]
    WrongStatus {
        /// The job id.
        job_id: String,
        /// The event kind.
        event: &'static str,
        /// The job's status.
        status: &'static str,
    },
    /// A submission or placement this state cannot use (no spec, no GPUs, no shape, ...).
    #[error("job {job_id:?}: {detail}")]
    Invalid {
        /// The job id.
        job_id: String,
        /// What is wrong, in words.
        detail: String,
    },
    /// A maintenance window that ends at or before its start.
    #[error("maintenance window [{start_ms}, {end_ms}) is empty")]
    EmptyWindow {
        /// The window's start.
        start_ms: i64,
        /// The window's end.
        end_ms: i64,
    },
    /// A cancellation of a maintenance window none of the nodes named has.
    #[error("no maintenance window [{start_ms}, {end_ms}) on the nodes named")]
    UnknownWindow {
        /// The window's start.
        start_ms: i64,
        /// The window's end.
        end_ms: i64,
    },
    /// A budget tree that does not validate; the previous tree stays in force.
    #[error("budget tree refused: {0}")]
    InvalidBudgetTree(#[from] BudgetError),
    /// A usage snapshot for an earlier window end than the one held that does not cover as
    /// much of the log either.
    #[error(
        "usage snapshot through sequence {through_sequence} (window end {window_end_ms}) is \
         older than the one held (through {held_through}, window end {held_ms})"
    )]
    StaleSnapshot {
        /// The snapshot's window end.
        window_end_ms: i64,
        /// The last log sequence it covers (0: not named).
        through_sequence: u64,
        /// The window end of the snapshot held.
        held_ms: i64,
        /// The last log sequence the held snapshot covers.
        held_through: u64,
    },
    /// A usage snapshot of another window than the one this state is set to take
    /// ([`DecisionState::set_usage_window_ms`]): an accounting instance configured with
    /// another `--window`.
    #[error(
        "usage snapshot of a {} window, where this service takes {} ones: is an accounting \
         service running with another --window?",
        exact_words(*window_ms),
        exact_words(*expected_ms)
    )]
    OtherWindow {
        /// The snapshot's window.
        window_ms: i64,
        /// The window this state takes.
        expected_ms: i64,
    },
    /// A node event for a node that is not registered.
    #[error("node {node:?} is not registered")]
    UnknownNode {
        /// The node name.
        node: String,
    },
}

/// Within-allocation queue order: higher declared priority first, then earlier submission,
/// then job id. Deriving `Ord` on the fields in this order gives exactly that.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QueueKey {
    /// Declared priority, reversed so higher sorts first.
    pub priority: Reverse<i32>,
    /// Submission time (kept across requeues).
    pub submitted_ms: i64,
    /// Job id, the last tie-break.
    pub job_id: Arc<str>,
}

/// What placement needs to know about a queued job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Nodes and GPUs per node.
    #[serde(with = "persist::ShapeDef")]
    pub shape: Shape,
    /// Protected minimum runtime in ms; 0 means unallocated.
    pub min_runtime_ms: i64,
}

impl Request {
    /// Whether the job is unallocated (charged to no budget, preemptible at any time).
    pub fn is_unallocated(&self) -> bool {
        self.min_runtime_ms == 0
    }
}

/// One allocation's queued jobs, each part already in queue order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationQueue {
    /// Jobs with a minimum runtime (charged to the allocation).
    pub allocated: SortedChunks<QueueKey, Request>,
    /// Jobs with minimum runtime 0 (fill idle capacity).
    pub unallocated: SortedChunks<QueueKey, Request>,
    /// The jobs of `allocated` that are debug-sized ([`debug::is_candidate`]), in the same
    /// order, so the debug pass reads a handful of entries rather than the whole queue.
    /// Derived: listed again when a checkpoint is loaded.
    #[serde(skip)]
    pub debug: BTreeMap<QueueKey, Request>,
    /// GPUs the jobs of `allocated` ask for, for the hour meters ([`super::hourly`]).
    /// Derived: counted again when a checkpoint is loaded.
    #[serde(skip)]
    pub queued_gpus: u64,
}

impl AllocationQueue {
    fn part_mut(&mut self, unallocated: bool) -> &mut SortedChunks<QueueKey, Request> {
        if unallocated {
            &mut self.unallocated
        } else {
            &mut self.allocated
        }
    }

    /// Jobs queued in both parts.
    pub fn len(&self) -> usize {
        self.allocated.len() + self.unallocated.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.allocated.is_empty() && self.unallocated.is_empty()
    }
}

/// Where a job stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobStatus {
    /// Waiting for a placement.
    Queued,
    /// Holding GPUs: placed by a decision, possibly confirmed started.
    Placed(Placed),
    /// Preempted and resumable, waiting for its requeue.
    Preempted,
}

impl JobStatus {
    fn name(&self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Placed(_) => "placed",
            JobStatus::Preempted => "preempted",
        }
    }
}

/// A job holding GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placed {
    /// GPUs taken on each node, as the placement event listed them (merged per node).
    pub nodes: Vec<(Arc<str>, u32)>,
    /// Placement time, replaced by the start time once the launcher confirms.
    pub start_ms: i64,
    /// Whether `JobStarted` was seen.
    pub started: bool,
    /// Set once a preemption is ordered: the job leaves by then at the latest.
    pub preempt_deadline_ms: Option<i64>,
}

/// A live job of this cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Allocation (leaf path) the job charges.
    pub allocation: Arc<str>,
    /// The person it runs for, as submitted: never read by the decision, shown in the queue
    /// listing so people find their jobs.
    pub user: Arc<str>,
    /// Shape and minimum runtime.
    pub request: Request,
    /// Declared priority within the allocation.
    pub priority: i32,
    /// Submission time.
    pub submitted_ms: i64,
    /// Whether it is requeued after a preemption.
    pub resumable: bool,
    /// Current status.
    pub status: JobStatus,
    /// The last preemption order it received, for `explain`: why it is being stopped, or was.
    pub last_order: Option<Arc<OrderNote>>,
}

/// A preemption order as a job's record keeps it (the `PreemptionOrdered` event, minus what
/// the job record holds already).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderNote {
    /// When the order was given.
    pub ordered_at_ms: i64,
    /// The waiting job it made room for (empty for a drain or maintenance).
    pub for_job_id: Arc<str>,
    /// The preemption service's reason.
    pub reason: Arc<str>,
    /// When the job had to be off its GPUs.
    pub grace_deadline_ms: i64,
    /// The rule behind the order (`PreemptionOrdered.cause`, kept as its wire number so a
    /// cause newer than this build survives a checkpoint).
    pub cause: i32,
}

impl Job {
    fn key(&self, id: &Arc<str>) -> QueueKey {
        QueueKey {
            priority: Reverse(self.priority),
            submitted_ms: self.submitted_ms,
            job_id: Arc::clone(id),
        }
    }
}

/// The earliest time a holding's GPUs can be counted free for a reservation:
/// unallocated work at once (it is always preemptible), allocated work when its minimum
/// runtime ends, or earlier if a preemption deadline comes first.
pub const RECLAIMABLE_AT_ONCE: i64 = i64::MIN;

fn reclaim_ms(request: &Request, placed: &Placed) -> i64 {
    if request.is_unallocated() {
        return RECLAIMABLE_AT_ONCE;
    }
    let protected_end = placed.start_ms.saturating_add(request.min_runtime_ms);
    match placed.preempt_deadline_ms {
        Some(deadline) => protected_end.min(deadline),
        None => protected_end,
    }
}

/// GPUs one job holds on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    /// GPUs held.
    pub gpus: u32,
    /// When they can be counted free for a reservation ([`RECLAIMABLE_AT_ONCE`] for
    /// unallocated work).
    pub reclaim_ms: i64,
    /// The job behind the holding. Derived from the job table, so not checkpointed: a
    /// restored state fills it in again (see `persist::Stored`).
    #[serde(skip)]
    pub holder: Holder,
}

/// What the preemption rules read about the job behind a holding, copied from the job table
/// when the holding is recorded.
///
/// Why a copy: a preemption pass looks at every running job on every node, and finding each
/// one in the job table (a B-tree of UUIDs that share long prefixes) was most of its cost.
/// The copy is refreshed whenever one of these facts changes (start confirmed, preemption
/// ordered), because each of those events re-records the job's holdings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    /// Allocation (leaf path) the job charges.
    pub allocation: Arc<str>,
    /// Protected minimum runtime in ms; 0 means unallocated.
    pub min_runtime_ms: i64,
    /// Placement time, replaced by the start time once the launcher confirms.
    pub start_ms: i64,
    /// Whether `JobStarted` was seen.
    pub started: bool,
    /// Whether the job is requeued after a preemption.
    pub resumable: bool,
    /// Set once a preemption is ordered.
    pub preempt_deadline_ms: Option<i64>,
    /// GPUs the job holds on all its nodes together.
    pub gpus: u64,
    /// The allocation's account in the budget tree in force; `None` without a tree or when
    /// the path is not an allocation of it. Resolved again whenever a new tree is set.
    pub account: Option<AccountId>,
}

impl Holder {
    fn of(job: &Job, placed: &Placed, tree: Option<&BudgetTree>) -> Holder {
        Holder {
            account: tree.and_then(|t| t.allocation(&job.allocation)),
            allocation: Arc::clone(&job.allocation),
            min_runtime_ms: job.request.min_runtime_ms,
            start_ms: placed.start_ms,
            started: placed.started,
            resumable: job.resumable,
            preempt_deadline_ms: placed.preempt_deadline_ms,
            gpus: placed.nodes.iter().map(|(_, g)| u64::from(*g)).sum(),
        }
    }
}

/// Who holds GPUs on one node. Kept apart from the inventory because a placement may name a
/// node before its registration is folded, or after its removal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLoad {
    /// GPUs held in all.
    pub used: u32,
    /// Holdings sorted by job id. A node holds a handful of jobs (at most one per GPU), so a
    /// small sorted array is both the cheapest to update and the cheapest for a cycle to read.
    pub holdings: Vec<(Arc<str>, Holding)>,
    /// GPUs held by jobs already ordered off (their holder has a preemption deadline): soon
    /// free, as every preemption pass counts them. Derived from the holders, so not
    /// checkpointed: counted again when they are refilled on loading.
    #[serde(skip)]
    pub ordered_off: u32,
    /// GPUs held by unallocated jobs not ordered off: what any allocated waiter may take here
    /// whatever the ranking says (derived like [`Self::ordered_off`]).
    #[serde(skip)]
    pub unallocated: u32,
    /// Allocated jobs not ordered off whose allocation is not in the budget tree in force: they
    /// have no claim (derived like [`Self::ordered_off`], and counted again when the tree
    /// changes).
    #[serde(skip)]
    pub outside_tree: u32,
}

/// What one holding adds to its node's derived counts ([`NodeLoad::ordered_off`],
/// [`NodeLoad::unallocated`], [`NodeLoad::outside_tree`]).
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    ordered_off: u32,
    unallocated: u32,
    outside_tree: u32,
}

impl Tally {
    fn of(holding: &Holding) -> Tally {
        let job = &holding.holder;
        if job.preempt_deadline_ms.is_some() {
            Tally {
                ordered_off: holding.gpus,
                ..Tally::default()
            }
        } else if job.min_runtime_ms <= 0 {
            Tally {
                unallocated: holding.gpus,
                ..Tally::default()
            }
        } else {
            Tally {
                outside_tree: u32::from(job.account.is_none()),
                ..Tally::default()
            }
        }
    }
}

impl NodeLoad {
    /// What job `job_id` holds here.
    pub fn holding(&self, job_id: &str) -> Option<&Holding> {
        self.holdings
            .binary_search_by(|(id, _)| (**id).cmp(job_id))
            .ok()
            .map(|i| &self.holdings[i].1)
    }

    fn insert(&mut self, job_id: &Arc<str>, holding: Holding) {
        let gpus = holding.gpus;
        let tally = Tally::of(&holding);
        match self
            .holdings
            .binary_search_by(|(id, _)| (**id).cmp(&**job_id))
        {
            Ok(i) => {
                let old = &self.holdings[i].1;
                self.used = self.used.saturating_sub(old.gpus);
                let old = Tally::of(old);
                self.uncount(old);
                self.holdings[i].1 = holding;
            }
            Err(i) => self.holdings.insert(i, (Arc::clone(job_id), holding)),
        }
        self.used = self.used.saturating_add(gpus);
        self.count(tally);
        self.debug_check_counts();
    }

    fn remove(&mut self, job_id: &str) {
        if let Ok(i) = self.holdings.binary_search_by(|(id, _)| (**id).cmp(job_id)) {
            let (_, h) = self.holdings.remove(i);
            self.used = self.used.saturating_sub(h.gpus);
            self.uncount(Tally::of(&h));
        }
        self.debug_check_counts();
    }

    /// In debug builds, checks the derived counts against a count from the holders.
    fn debug_check_counts(&self) {
        if cfg!(debug_assertions) {
            let fresh = self.counted();
            assert_eq!(
                (fresh.ordered_off, fresh.unallocated, fresh.outside_tree),
                (self.ordered_off, self.unallocated, self.outside_tree),
                "derived counts of a node's load"
            );
        }
    }

    /// The derived counts, summed from the holders.
    fn counted(&self) -> Tally {
        self.holdings
            .iter()
            .map(|(_, h)| Tally::of(h))
            .fold(Tally::default(), |a, t| Tally {
                ordered_off: a.ordered_off.saturating_add(t.ordered_off),
                unallocated: a.unallocated.saturating_add(t.unallocated),
                outside_tree: a.outside_tree.saturating_add(t.outside_tree),
            })
    }

    fn count(&mut self, t: Tally) {
        self.ordered_off = self.ordered_off.saturating_add(t.ordered_off);
        self.unallocated = self.unallocated.saturating_add(t.unallocated);
        self.outside_tree = self.outside_tree.saturating_add(t.outside_tree);
    }

    fn uncount(&mut self, t: Tally) {
        self.ordered_off = self.ordered_off.saturating_sub(t.ordered_off);
        self.unallocated = self.unallocated.saturating_sub(t.unallocated);
        self.outside_tree = self.outside_tree.saturating_sub(t.outside_tree);
    }

    /// Counts the derived counts again from the holders.
    fn recount(&mut self) {
        let t = self.counted();
        (self.ordered_off, self.unallocated, self.outside_tree) =
            (t.ordered_off, t.unallocated, t.outside_tree);
    }
}

/// A maintenance window on one node, `[start_ms, end_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Window {
    /// Start of the window.
    pub start_ms: i64,
    /// End of the window.
    pub end_ms: i64,
}

impl Window {
    /// When its node stops taking work for it: [`MAINTENANCE_LEAD_MS`] before the start, when
    /// the preemption service starts clearing the node. Work placed before then must be
    /// unprotected by then.
    pub fn closes_at(&self) -> i64 {
        self.start_ms.saturating_sub(MAINTENANCE_LEAD_MS)
    }
}

/// A placed allocated job, for charging usage the snapshot has not seen yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    /// GPUs held.
    pub gpus: u64,
    /// Start (placement, then confirmed start) time.
    pub start_ms: i64,
    /// Minimum runtime in ms.
    pub min_runtime_ms: i64,
    /// Set once a preemption is ordered: its grace deadline. Its GPUs then count as soon free,
    /// so it no longer counts towards its allocation's share floor, and it is charged to the
    /// deadline at most, as accounting charges it, however late its stop is reported
    /// ([`crate::domain::rank`]).
    pub deadline_ms: Option<i64>,
}

impl InFlight {
    /// Whether a preemption is ordered.
    pub fn stopping(&self) -> bool {
        self.deadline_ms.is_some()
    }
}

/// A run of allocated work that ended after the usage snapshot's window end, in an entry the
/// snapshot does not cover: the ranking charges its time since the window end until a snapshot
/// covers it ([`crate::domain::rank`]), as it charges the runs still in flight. Without it a
/// run that ended between two snapshots would count for nothing in between (for as long as
/// the accounting service is down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedRun {
    /// The sequence of the entry that ended it: a snapshot through it or later covers it.
    pub sequence: u64,
    /// Its start (the launcher's confirmed start).
    pub start_ms: i64,
    /// When it ended.
    pub end_ms: i64,
    /// GPUs it held.
    pub gpus: u64,
}

impl EndedRun {
    /// GPU-ms it ran beyond the snapshot's window end `window_end`.
    pub fn charge_beyond(&self, window_end: i64) -> u128 {
        let ms = self.end_ms.saturating_sub(self.start_ms.max(window_end));
        u128::from(u64::try_from(ms).unwrap_or(0)) * u128::from(self.gpus)
    }
}

/// One allocation's [`EndedRun`]s, in log order, with what they ran beyond the held
/// snapshot's window end between them: the ranking reads the sum, so a long accounting outage
/// (the runs pile up until a snapshot covers them) costs each ranking nothing more. The sum
/// is derived: checkpointed as the list alone, and summed again when a snapshot is taken and
/// when a checkpoint is loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EndedRuns {
    /// The runs, in log order.
    runs: Vec<EndedRun>,
    /// What they ran beyond the held snapshot's window end.
    #[serde(skip)]
    charge: u128,
}

impl EndedRuns {
    /// Adds `run`, charged beyond `window_end`.
    fn push(&mut self, run: EndedRun, window_end: i64) {
        self.charge = self.charge.saturating_add(run.charge_beyond(window_end));
        self.runs.push(run);
    }

    /// Keeps the runs `keep` says, and sums what they ran beyond `window_end`.
    pub(crate) fn retain_beyond(&mut self, window_end: i64, keep: impl FnMut(&EndedRun) -> bool) {
        self.runs.retain(keep);
        self.charge = self
            .runs
            .iter()
            .map(|r| r.charge_beyond(window_end))
            .fold(0, u128::saturating_add);
    }

    /// What the runs ran beyond the held snapshot's window end.
    pub fn charge(&self) -> u128 {
        self.charge
    }

    /// The runs, in log order.
    pub fn runs(&self) -> &[EndedRun] {
        &self.runs
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// One allocation's window usage as the accounting service reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationUsage {
    /// GPU-ms charged inside the window.
    pub charged_gpu_ms: u64,
    /// GPU-ms of allocated time inside the window.
    pub allocated_gpu_ms: u64,
}

/// The latest usage snapshot for this cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// End of the window the snapshot covers.
    pub window_end_ms: i64,
    /// Window length.
    pub window_ms: i64,
    /// Last sequence accounting had folded.
    pub through_sequence: u64,
    /// Usage by allocation path.
    pub by_allocation: BTreeMap<String, AllocationUsage>,
}

/// Everything the decision cycle of one cluster reads, folded from the log.
///
/// Checkpointed with serde: every field below but the derived ones (the flat copy of the
/// inventory, the [`Holder`] of each holding), which loading (through `persist::Stored`)
/// builds again from the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "persist::Stored")]
pub struct DecisionState {
    pub(crate) cluster: String,
    pub(crate) last_applied: u64,
    #[serde(with = "persist::budget_tree")]
    pub(crate) tree: Option<BudgetTree>,
    /// The tree's allocations in path order, for ranking inputs read by walking paths in
    /// order rather than searching the tree by path. Derived: not checkpointed, listed again
    /// whenever a tree is set and when a checkpoint is loaded.
    #[serde(skip)]
    pub(crate) allocations_by_path: Vec<AccountId>,
    #[serde(with = "persist::inventory")]
    pub(crate) inventory: Inventory,
    /// The registered nodes with the position of each one's load, for walks over every node.
    /// Derived: not checkpointed, built again whenever a node event changes the inventory and
    /// when a checkpoint is loaded, kept in step by `hold` and `release` otherwise.
    #[serde(skip)]
    pub(crate) registered: NodeIndex,
    pub(crate) maintenance: BTreeMap<String, Vec<Window>>,
    pub(crate) loads: FlatMap<Arc<str>, NodeLoad>,
    pub(crate) jobs: BTreeMap<Arc<str>, Job>,
    pub(crate) queues: BTreeMap<Arc<str>, AllocationQueue>,
    /// How many queued jobs have each shape, as `(nodes, GPUs per node)`: a cluster's jobs
    /// come in a few shapes, so "could any of them fit now" is a short walk
    /// ([`crate::domain::fit`]). Derived: not checkpointed, counted again when a checkpoint
    /// is loaded, kept in step by `enqueue` and `dequeue`.
    #[serde(skip)]
    pub(crate) queued_shapes: BTreeMap<(u32, u32), usize>,
    pub(crate) in_flight: BTreeMap<Arc<str>, SortedChunks<Arc<str>, InFlight>>,
    /// `in_flight` by start time with per-allocation totals ([`FlightIndex`]). Derived: not
    /// checkpointed, built again when a checkpoint is loaded, kept in step by `hold` and
    /// `release` otherwise.
    #[serde(skip)]
    pub(crate) flight: FlightIndex,
    pub(crate) usage: Option<Usage>,
    /// Per allocation path, its runs that ended since the snapshot's window end in entries the
    /// snapshot does not cover, in log order ([`EndedRun`]). Empty while there is no snapshot
    /// (every run is then charged from its start while in flight, and not after).
    pub(crate) ended: BTreeMap<Arc<str>, EndedRuns>,
    /// GPUs freed by preemption orders, held for the waiting job each order named, by that
    /// job's id ([`super::promise`]).
    pub(crate) promises: BTreeMap<Arc<str>, Promise>,
    /// GPUs of debug work each allocation may run ahead of rank ([`debug`]). A setting, not
    /// folded state: never checkpointed, the product default unless set.
    #[serde(skip)]
    pub(crate) debug_allowance_gpus: u32,
    /// Whether the share floor orders work and limits victims ([`crate::domain::rank`]). A
    /// setting like the debug allowance: never checkpointed, on unless set off.
    #[serde(skip)]
    pub(crate) share_floor: bool,
    /// Per allocation, its run and demand in the open clock hour ([`super::hourly`]).
    pub(crate) meters: BTreeMap<Arc<str>, HourMeter>,
    /// The cluster's registered GPUs integrated over the open clock hour (its run meter; no
    /// demand): what an allocation is owed so far this hour is its fraction of this, not of
    /// today's GPUs times the minutes elapsed, which would count time before the cluster had
    /// its nodes ([`super::hourly`]).
    pub(crate) capacity_meter: HourMeter,
    /// What each allocation was owed this hour under budget trees replaced within it
    /// ([`super::hourly::OwedBefore`]).
    pub(crate) owed_before: OwedBefore,
    /// Whether share floors move with each hour's owed time ([`super::hourly`]). A setting
    /// like the share floor: never checkpointed, on unless set off.
    #[serde(skip)]
    pub(crate) hourly_floor: bool,
    /// The usage window the accounting service is configured with, when the service knows it
    /// ([`DecisionState::set_usage_window_ms`]): snapshots of another window are refused. A
    /// setting that moves the fold, so the services name it in their checkpoint's kind; never
    /// checkpointed, `None` (any window) unless set.
    #[serde(skip)]
    pub(crate) usage_window_ms: Option<i64>,
}

/// How long before a maintenance window its node stops taking work: the preemption service's
/// default grace period, which it starts clearing the node that long before the window. Work
/// placed on the node before then is unprotected by the time the clearing starts, so the
/// clearing never cuts a protection. (With a longer grace configured there, the clearing waits
/// for protections that end before the window: see `fairshare_preemption::domain::drain`.)
/// A product constant, not a setting, so an audit re-derives placements without knowing the
/// preemption service's configuration.
pub const MAINTENANCE_LEAD_MS: i64 = 30_000;

/// The job a job event is about.
fn job_event_id(body: &Body) -> Option<&str> {
    let id = match body {
        Body::JobSubmitted(e) => &e.job_id,
        Body::JobPlaced(e) => &e.job_id,
        Body::JobStarted(e) => &e.job_id,
        Body::JobFinished(e) => &e.job_id,
        Body::JobFailed(e) => &e.job_id,
        Body::JobCancelled(e) => &e.job_id,
        Body::PreemptionOrdered(e) => &e.job_id,
        Body::JobPreempted(e) => &e.job_id,
        Body::JobRequeued(e) => &e.job_id,
        _ => return None,
    };
    Some(id)
}

/// The key of `shape` in [`DecisionState::queued_shapes`].
pub(crate) fn shape_key(shape: Shape) -> (u32, u32) {
    (shape.nodes, shape.gpus_per_node)
}

/// Counts one queued job of `shape` less.
fn forget_shape(shapes: &mut BTreeMap<(u32, u32), usize>, shape: Shape) {
    let key = shape_key(shape);
    if let Some(n) = shapes.get_mut(&key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            shapes.remove(&key);
        }
    }
}

fn check_cluster(ours: &str, theirs: &str) -> Result<(), Ignored> {
    if ours == theirs {
        Ok(())
    } else {
        Err(Ignored::OtherCluster {
            cluster: theirs.to_owned(),
        })
    }
}

impl DecisionState {
    /// An empty state for cluster `cluster`; events naming other clusters are ignored.
    pub fn new(cluster: impl Into<String>) -> DecisionState {
        DecisionState {
            cluster: cluster.into(),
            last_applied: 0,
            tree: None,
            allocations_by_path: Vec::new(),
            inventory: Inventory::default(),
            registered: NodeIndex::default(),
            maintenance: BTreeMap::new(),
            loads: FlatMap::default(),
            jobs: BTreeMap::new(),
            queues: BTreeMap::new(),
            queued_shapes: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            flight: FlightIndex::default(),
            usage: None,
            ended: BTreeMap::new(),
            promises: BTreeMap::new(),
            debug_allowance_gpus: debug::DEFAULT_DEBUG_ALLOWANCE_GPUS,
            share_floor: true,
            meters: BTreeMap::new(),
            capacity_meter: HourMeter::default(),
            owed_before: OwedBefore::default(),
            hourly_floor: true,
            usage_window_ms: None,
        }
    }

    /// GPUs of debug work each allocation may run ahead of rank ([`debug`]).
    pub fn debug_allowance_gpus(&self) -> u32 {
        self.debug_allowance_gpus
    }

    /// Sets the debug allowance (0 turns it off). The services keep the product default; the
    /// simulator sets it to compare policies. Decisions re-derived by an audit must use the
    /// same setting.
    pub fn set_debug_allowance_gpus(&mut self, gpus: u32) {
        self.debug_allowance_gpus = gpus;
    }

    /// Whether the share floor is on ([`crate::domain::rank`]).
    pub fn share_floor(&self) -> bool {
        self.share_floor
    }

    /// Turns the share floor on or off. The services keep it on; the simulator turns it off
    /// to compare. Decisions re-derived by an audit must use the same setting.
    pub fn set_share_floor(&mut self, on: bool) {
        self.share_floor = on;
    }

    /// Whether share floors move with each hour's owed time ([`super::hourly`]).
    pub fn hourly_floor(&self) -> bool {
        self.hourly_floor
    }

    /// Turns the hourly floor on or off. The services keep it on; the simulator turns it off
    /// to compare. Decisions re-derived by an audit must use the same setting. Set it before
    /// folding: the hour meters are kept only while it is on.
    pub fn set_hourly_floor(&mut self, on: bool) {
        self.hourly_floor = on;
    }

    /// The usage window a snapshot must cover to be taken (`None`: any).
    pub fn usage_window_ms(&self) -> Option<i64> {
        self.usage_window_ms
    }

    /// Takes only usage snapshots of a `window_ms` window from now on (`None`: any). The
    /// services set the accounting service's window (`--window`), so that two accounting
    /// instances configured with different windows cannot take turns setting the ranking
    /// usage; snapshots of another window are refused ([`Ignored::OtherWindow`]). Set it before
    /// folding: it decides which snapshots the fold takes, so a fold must be replayed (and
    /// audited) with the setting it was made with.
    pub fn set_usage_window_ms(&mut self, window_ms: Option<i64>) {
        self.usage_window_ms = window_ms;
    }

    /// The cluster this state follows.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The last stream sequence applied (0 before any).
    pub fn last_applied(&self) -> u64 {
        self.last_applied
    }

    /// The budget tree in force, if one was set.
    pub fn budget_tree(&self) -> Option<&BudgetTree> {
        self.tree.as_ref()
    }

    /// Registered nodes and their cordon state.
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    /// Every live job (queued, placed, running, or stopped and waiting for its requeue), by id.
    pub fn jobs(&self) -> impl Iterator<Item = (&str, &Job)> {
        self.jobs.iter().map(|(id, job)| (&**id, job))
    }

    /// A live job by id.
    pub fn job(&self, job_id: &str) -> Option<&Job> {
        self.jobs.get(job_id)
    }

    /// A live job by id, with the state's own copy of the id (borrowed as long as the state).
    pub fn job_entry(&self, job_id: &str) -> Option<(&str, &Job)> {
        self.jobs
            .get_key_value(job_id)
            .map(|(id, job)| (&**id, job))
    }

    /// Jobs waiting for a placement.
    pub fn queued_len(&self) -> usize {
        self.queues.values().map(AllocationQueue::len).sum()
    }

    /// Every queued job's id and shape, allocated and unallocated, by allocation path and then
    /// queue order.
    pub fn queued_shapes(&self) -> impl Iterator<Item = (&str, Shape)> {
        self.queues.values().flat_map(|q| {
            q.allocated
                .iter()
                .chain(q.unallocated.iter())
                .map(|(key, request)| (&*key.job_id, request.shape))
        })
    }

    /// Queued jobs by allocation path.
    pub fn queues(&self) -> &BTreeMap<Arc<str>, AllocationQueue> {
        &self.queues
    }

    /// Every placed or running allocated job, once each (a multi-node job too), by
    /// allocation path and job id.
    pub fn in_flight(&self) -> impl Iterator<Item = &InFlight> {
        self.in_flight
            .values()
            .flat_map(|jobs| jobs.iter().map(|(_, job)| job))
    }

    /// The placed or running allocated jobs that started after `after_ms`, once each (see
    /// [`Self::in_flight`]), by allocation path and start.
    pub fn in_flight_started_after(&self, after_ms: i64) -> impl Iterator<Item = &InFlight> {
        self.flight.started_after(after_ms)
    }

    /// The longest minimum runtime a placed or running allocated job declares: no job that
    /// started longer ago than this is still inside its minimum runtime.
    pub fn longest_min_runtime_in_flight(&self) -> Option<i64> {
        self.flight.longest_min_runtime()
    }

    /// GPUs held on node `node` and by whom.
    pub fn load(&self, node: &str) -> Option<&NodeLoad> {
        self.loads.get(node)
    }

    /// Maintenance windows known for `node`, sorted by start.
    pub fn maintenance(&self, node: &str) -> &[Window] {
        self.maintenance.get(node).map_or(&[], Vec::as_slice)
    }

    /// Whether any node has a maintenance window on record (past windows included until a
    /// later announcement drops them): a cheap "could anything be under maintenance" check.
    pub fn has_maintenance(&self) -> bool {
        !self.maintenance.is_empty()
    }

    /// The usage snapshot in force, if any.
    pub fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }

    /// Applies the event at stream `sequence`. Sequences at or below the last applied one are
    /// refused as duplicates; any other event advances the last applied sequence even when it
    /// is ignored, so the decision basis always names the true log position.
    pub fn apply(&mut self, sequence: u64, event: &pb::Event) -> Result<(), Ignored> {
        self.apply_stored(sequence, event, None)
    }

    /// [`Self::apply`] for an entry the stream stored at `stored_ms` (`None`: a log without
    /// stored times, as the simulator's): the event takes effect at its own time but no later
    /// than [`fairshare_model::logtime::MAX_AHEAD_OF_LOG_MS`] after it was stored. A launcher
    /// whose clock runs a day ahead would otherwise start its job tomorrow in this fold,
    /// protecting it from preemption, drains and maintenance for a day beyond its minimum
    /// runtime (forever, stamped at the end of time), while accounting charged it from now.
    pub fn apply_stored(
        &mut self,
        sequence: u64,
        event: &pb::Event,
        stored_ms: Option<i64>,
    ) -> Result<(), Ignored> {
        if sequence <= self.last_applied {
            return Err(Ignored::Duplicate {
                sequence,
                last_applied: self.last_applied,
            });
        }
        self.last_applied = sequence;
        let at = effective_at(event.at_ms, stored_ms);
        let Some(body) = &event.body else {
            return Err(Ignored::NoBody);
        };
        // A job event changes at most its own allocation's rates: the job's record says
        // which (before the event for an ending job, after it for a new one).
        let job = self.hourly_floor.then(|| job_event_id(body)).flatten();
        let allocation_of = |s: &Self| {
            job.and_then(|j| s.jobs.get(j))
                .map(|j| Arc::clone(&j.allocation))
        };
        let before = allocation_of(self);
        // A run ordered off and still in flight past its grace deadline: once its stop is
        // folded, the meter takes back what it counted of it since the deadline.
        let overdue = before.as_ref().and_then(|a| {
            let run = self.flight.by_allocation.get(a)?.stopping.get(job?)?;
            Some((run.gpus, run.deadline_ms.filter(|d| *d < at)?))
        });
        let result = self.apply_body(at, body);
        // A refused event changes nothing but the sequence, meters included.
        if result.is_ok()
            && let Some(allocation) = before.or_else(|| allocation_of(self))
        {
            self.meter_allocation(&allocation, at);
            let released = |s: &Self| {
                s.flight
                    .by_allocation
                    .get(&allocation)
                    .is_none_or(|f| job.is_none_or(|j| !f.stopping.contains_key(j)))
            };
            if let Some((gpus, deadline)) = overdue
                && released(self)
                && let Some(meter) = self.meters.get_mut(&allocation)
            {
                meter.uncount_since(gpus, deadline);
            }
        }
        result
    }

    fn apply_body(&mut self, at: i64, body: &Body) -> Result<(), Ignored> {
        match body {
            Body::JobSubmitted(s) => self.submitted(at, s),
            Body::JobPlaced(p) => self.placed(at, p),
            Body::JobStarted(s) => self.started(at, &s.job_id),
            Body::JobFinished(e) => self.ended(at, &e.job_id),
            Body::JobFailed(e) => self.ended(at, &e.job_id),
            Body::JobCancelled(e) => self.ended(at, &e.job_id),
            Body::PreemptionOrdered(p) => self.preemption_ordered(at, p),
            Body::JobPreempted(p) => self.preempted(at, &p.job_id),
            Body::JobRequeued(r) => self.requeued(&r.job_id),
            Body::JobRejected(r) => check_cluster(&self.cluster, &r.cluster),
            Body::BudgetTreeSet(b) => {
                check_cluster(&self.cluster, &b.cluster)?;
                // An invalid tree is refused whole; the one in force stays.
                let tree = BudgetTree::from_accounts(&b.accounts)?;
                let (capacity_area, _) = self.capacity_meter.at(at);
                self.owed_before
                    .close(self.tree.as_ref(), capacity_area, at);
                self.allocations_by_path = rank::allocations_by_path(&tree);
                self.tree = Some(tree);
                self.resolve_holder_accounts();
                Ok(())
            }
            Body::NodeRegistered(n) => {
                check_cluster(&self.cluster, &n.cluster)?;
                self.inventory.register(&n.node, n.gpus);
                self.node_changed(&n.node);
                self.capacity_meter.set(at, self.total_gpus(), 0);
                Ok(())
            }
            Body::NodeCordoned(n) => self.cordon(&n.cluster, &n.node, true),
            Body::NodeUncordoned(n) => self.cordon(&n.cluster, &n.node, false),
            Body::NodeDrained(n) => check_cluster(&self.cluster, &n.cluster),
            Body::NodeRemoved(n) => {
                check_cluster(&self.cluster, &n.cluster)?;
                if !self.inventory.nodes().contains_key(&n.node) {
                    return Err(Ignored::UnknownNode {
                        node: n.node.clone(),
                    });
                }
                self.inventory.remove(&n.node);
                self.node_changed(&n.node);
                self.capacity_meter.set(at, self.total_gpus(), 0);
                self.maintenance.remove(&n.node);
                Ok(())
            }
            Body::MaintenanceScheduled(m) => self.maintenance_scheduled(at, m),
            Body::MaintenanceCancelled(m) => self.maintenance_cancelled(m),
            Body::UsageSnapshot(u) => self.snapshot(u),
        }
    }

    fn cordon(&mut self, cluster: &str, node: &str, cordoned: bool) -> Result<(), Ignored> {
        check_cluster(&self.cluster, cluster)?;
        if !self.inventory.nodes().contains_key(node) {
            return Err(Ignored::UnknownNode {
                node: node.to_owned(),
            });
        }
        self.inventory.set_cordoned(node, cordoned);
        self.node_changed(node);
        Ok(())
    }

    fn maintenance_scheduled(
        &mut self,
        at: i64,
        m: &pb::MaintenanceScheduled,
    ) -> Result<(), Ignored> {
        check_cluster(&self.cluster, &m.cluster)?;
        if m.end_ms <= m.start_ms {
            return Err(Ignored::EmptyWindow {
                start_ms: m.start_ms,
                end_ms: m.end_ms,
            });
        }
        let window = Window {
            start_ms: m.start_ms,
            end_ms: m.end_ms,
        };
        for node in &m.nodes {
            let windows = self.maintenance.entry(node.clone()).or_default();
            // Windows over before this event's time can never matter again: dropping them keeps
            // memory bounded by what is scheduled, not by history.
            windows.retain(|w| w.end_ms > at);
            if let Err(i) = windows.binary_search(&window) {
                windows.insert(i, window);
            }
        }
        Ok(())
    }

    /// Takes the window back from each node named that has it (orders already given for it
    /// are the preemption service's, and stand).
    fn maintenance_cancelled(&mut self, m: &pb::MaintenanceCancelled) -> Result<(), Ignored> {
        check_cluster(&self.cluster, &m.cluster)?;
        let window = Window {
            start_ms: m.start_ms,
            end_ms: m.end_ms,
        };
        let mut found = false;
        for node in &m.nodes {
            if let Some(windows) = self.maintenance.get_mut(node)
                && let Ok(i) = windows.binary_search(&window)
            {
                windows.remove(i);
                found = true;
                if windows.is_empty() {
                    self.maintenance.remove(node);
                }
            }
        }
        if found {
            Ok(())
        } else {
            Err(Ignored::UnknownWindow {
                start_ms: m.start_ms,
                end_ms: m.end_ms,
            })
        }
    }

    fn snapshot(&mut self, u: &pb::UsageSnapshot) -> Result<(), Ignored> {
        check_cluster(&self.cluster, &u.cluster)?;
        if let Some(expected_ms) = self.usage_window_ms
            && u.window_ms != expected_ms
        {
            return Err(Ignored::OtherWindow {
                window_ms: u.window_ms,
                expected_ms,
            });
        }
        if let Some(held) = &self.usage {
            // Stale only if older by the accounting service's clock and not covering at least
            // as much of the log. By the clock alone, one snapshot from a clock that ran ahead
            // would make every correct one after it look stale until real time caught up,
            // freezing usage. By the log alone, a snapshot of an instance that folds one
            // cluster (whose position is that cluster's last event) would look older than one
            // of an instance folding every cluster, on a cluster where nothing happens.
            let covers_as_much = u.through_sequence > 0
                && held.through_sequence > 0
                && u.through_sequence >= held.through_sequence;
            let stale = u.window_end_ms < held.window_end_ms && !covers_as_much;
            if stale {
                return Err(Ignored::StaleSnapshot {
                    window_end_ms: u.window_end_ms,
                    through_sequence: u.through_sequence,
                    held_ms: held.window_end_ms,
                    held_through: held.through_sequence,
                });
            }
        }
        let mut by_allocation = BTreeMap::new();
        for a in &u.allocations {
            // A repeated allocation in one snapshot would be a producer bug; summing keeps the
            // result independent of the order the entries were written in.
            let e: &mut AllocationUsage = by_allocation.entry(a.allocation.clone()).or_default();
            e.charged_gpu_ms = e.charged_gpu_ms.saturating_add(a.charged_gpu_ms);
            e.allocated_gpu_ms = e.allocated_gpu_ms.saturating_add(a.allocated_gpu_ms);
        }
        // Runs the new snapshot covers, or that ended before its window did, charge nothing
        // beyond it.
        let (through, window_end) = (u.through_sequence, u.window_end_ms);
        self.ended.retain(|_, runs| {
            runs.retain_beyond(window_end, |r| {
                r.end_ms > window_end && (through == 0 || r.sequence > through)
            });
            !runs.is_empty()
        });
        self.usage = Some(Usage {
            window_end_ms: u.window_end_ms,
            window_ms: u.window_ms,
            through_sequence: u.through_sequence,
            by_allocation,
        });
        Ok(())
    }

    fn submitted(&mut self, at: i64, s: &pb::JobSubmitted) -> Result<(), Ignored> {
        let invalid = |detail: &str| Ignored::Invalid {
            job_id: s.job_id.clone(),
            detail: detail.to_owned(),
        };
        let Some(spec) = &s.spec else {
            return Err(invalid("submission has no spec"));
        };
        check_cluster(&self.cluster, &spec.cluster)?;
        if s.job_id.is_empty() {
            return Err(invalid("submission has no job id"));
        }
        if self.jobs.contains_key(s.job_id.as_str()) {
            return Err(Ignored::DuplicateJob {
                job_id: s.job_id.clone(),
            });
        }
        if spec.min_runtime_s < 0 {
            return Err(invalid("negative minimum runtime"));
        }
        let shape = match &s.shape {
            Some(sh) if sh.nodes > 0 && sh.gpus_per_node > 0 => Shape {
                nodes: sh.nodes,
                gpus_per_node: sh.gpus_per_node,
            },
            Some(_) => return Err(invalid("shape with zero nodes or zero GPUs per node")),
            // Older producers: resolve the request against the nodes known now, as submission
            // would have.
            None => shape::resolve(spec.gpus, spec.nodes, &self.inventory)
                .map_err(|e| invalid(&e.to_string()))?,
        };
        let request = Request {
            shape,
            min_runtime_ms: spec.min_runtime_s.saturating_mul(1000),
        };
        let id: Arc<str> = Arc::from(s.job_id.as_str());
        let job = Job {
            allocation: Arc::from(spec.allocation.as_str()),
            user: Arc::from(spec.user.as_str()),
            request,
            priority: spec.priority,
            submitted_ms: at,
            resumable: spec.resumable,
            status: JobStatus::Queued,
            last_order: None,
        };
        self.enqueue(&id, &job);
        self.jobs.insert(id, job);
        Ok(())
    }

    fn enqueue(&mut self, id: &Arc<str>, job: &Job) {
        let queue = match self.queues.get_mut(&job.allocation) {
            Some(q) => q,
            None => self.queues.entry(Arc::clone(&job.allocation)).or_default(),
        };
        if debug::is_candidate(&job.request) {
            queue.debug.insert(job.key(id), job.request);
        }
        let replaced = queue
            .part_mut(job.request.is_unallocated())
            .insert(job.key(id), job.request);
        if !job.request.is_unallocated() {
            queue.queued_gpus = queue
                .queued_gpus
                .saturating_add(job.request.shape.total_gpus());
            if let Some(old) = replaced {
                queue.queued_gpus = queue.queued_gpus.saturating_sub(old.shape.total_gpus());
            }
        }
        if let Some(old) = replaced {
            forget_shape(&mut self.queued_shapes, old.shape);
        }
        *self
            .queued_shapes
            .entry(shape_key(job.request.shape))
            .or_insert(0) += 1;
    }

    fn dequeue(&mut self, id: &Arc<str>, job: &Job) {
        if let Some(queue) = self.queues.get_mut(&job.allocation) {
            let removed = queue
                .part_mut(job.request.is_unallocated())
                .remove(&job.key(id));
            if removed.is_some() && debug::is_candidate(&job.request) {
                queue.debug.remove(&job.key(id));
            }
            if let Some(r) = &removed
                && !r.is_unallocated()
            {
                queue.queued_gpus = queue.queued_gpus.saturating_sub(r.shape.total_gpus());
            }
            if queue.is_empty() {
                self.queues.remove(&job.allocation);
            }
            if let Some(r) = removed {
                forget_shape(&mut self.queued_shapes, r.shape);
            }
        }
    }

    fn live(&self, job_id: &str) -> Result<(Arc<str>, &Job), Ignored> {
        match self.jobs.get_key_value(job_id) {
            Some((id, job)) => Ok((Arc::clone(id), job)),
            None => Err(Ignored::UnknownJob {
                job_id: job_id.to_owned(),
            }),
        }
    }

    fn placed(&mut self, at: i64, p: &pb::JobPlaced) -> Result<(), Ignored> {
        let (id, job) = self.live(&p.job_id)?;
        if job.status != JobStatus::Queued {
            return Err(Ignored::WrongStatus {
                job_id: p.job_id.clone(),
                event: "job_placed",
                status: job.status.name(),
            });
        }
        // Merge repeated nodes so every holding is one entry; the log, not the job's shape, says
        // what the job holds.
        let mut nodes: BTreeMap<&str, u32> = BTreeMap::new();
        for n in &p.nodes {
            let g = nodes.entry(n.node.as_str()).or_default();
            *g = g.saturating_add(n.gpus);
        }
        nodes.retain(|_, g| *g > 0);
        if nodes.is_empty() {
            return Err(Ignored::Invalid {
                job_id: p.job_id.clone(),
                detail: "placement names no GPUs".into(),
            });
        }
        let placed = Placed {
            nodes: nodes.into_iter().map(|(n, g)| (Arc::from(n), g)).collect(),
            start_ms: at,
            started: false,
            preempt_deadline_ms: None,
        };
        let job = job.clone();
        self.dequeue(&id, &job);
        self.drop_promise(&id);
        self.hold(&id, &job, &placed);
        if let Some(j) = self.jobs.get_mut(&id) {
            j.status = JobStatus::Placed(placed);
        }
        Ok(())
    }

    pub(crate) fn hold(&mut self, id: &Arc<str>, job: &Job, placed: &Placed) {
        let reclaim = reclaim_ms(&job.request, placed);
        let holder = Holder::of(job, placed, self.tree.as_ref());
        for (node, gpus) in &placed.nodes {
            let (i, inserted) = self.loads.index_or_default(&**node, || Arc::clone(node));
            if inserted {
                self.registered.load_inserted(i, node);
            }
            let load = self.loads.value_at_mut(i);
            let before = load.used;
            load.insert(
                id,
                Holding {
                    gpus: *gpus,
                    reclaim_ms: reclaim,
                    holder: holder.clone(),
                },
            );
            let after = load.used;
            self.registered.used_changed(node, before, after);
        }
        if !job.request.is_unallocated() {
            let gpus = placed.nodes.iter().map(|(_, g)| u64::from(*g)).sum();
            let run = InFlight {
                gpus,
                start_ms: placed.start_ms,
                min_runtime_ms: job.request.min_runtime_ms,
                deadline_ms: placed.preempt_deadline_ms,
            };
            let replaced = self
                .in_flight
                .entry(Arc::clone(&job.allocation))
                .or_default()
                .insert(Arc::clone(id), run);
            if let Some(old) = replaced {
                self.flight.remove(&job.allocation, id, &old);
            }
            self.flight.insert(&job.allocation, id, run);
        }
    }

    /// Notes the end at `at` of `job`'s run (placed as `placed`) in the entry being applied,
    /// for the ranking until a snapshot covers it ([`EndedRun`]): allocated work that started
    /// (accounting charges from the launcher's start), ending after the snapshot's window end.
    /// A run ordered off ends at its grace deadline at the latest, as accounting charges it
    /// (a stop reported late, after an outage, is not charged beyond it).
    fn note_ended(&mut self, job: &Job, placed: &Placed, at: i64) {
        let Some(usage) = &self.usage else {
            return;
        };
        let at = placed
            .preempt_deadline_ms
            .map_or(at, |deadline| deadline.min(at));
        if job.request.is_unallocated() || !placed.started || at <= usage.window_end_ms {
            return;
        }
        let gpus = placed.nodes.iter().map(|(_, g)| u64::from(*g)).sum();
        let window_end = usage.window_end_ms;
        self.ended
            .entry(Arc::clone(&job.allocation))
            .or_default()
            .push(
                EndedRun {
                    sequence: self.last_applied,
                    start_ms: placed.start_ms,
                    end_ms: at,
                    gpus,
                },
                window_end,
            );
    }

    pub(crate) fn release(&mut self, id: &Arc<str>, job: &Job, placed: &Placed) {
        for (node, _) in &placed.nodes {
            if let Some(i) = self.loads.index_of(&**node) {
                let load = self.loads.value_at_mut(i);
                let before = load.used;
                load.remove(id);
                let after = load.used;
                if load.holdings.is_empty() {
                    self.loads.remove_at(i);
                    self.registered.load_removed(i);
                }
                self.registered.used_changed(node, before, after);
            }
        }
        if let Some(runs) = self.in_flight.get_mut(&job.allocation) {
            if let Some(run) = runs.remove(id) {
                self.flight.remove(&job.allocation, id, &run);
            }
            if runs.is_empty() {
                self.in_flight.remove(&job.allocation);
            }
        }
    }

    /// Re-records a placed job's holdings after its start time or deadline changed (on the
    /// same nodes). Holding again replaces each node's holding and the in-flight run in place,
    /// which ends in a state equal to releasing first (`tests::state`; the in-flight list's
    /// chunks may be cut elsewhere, which no reader sees): releasing took a node's only
    /// holding's load out of the node index, and holding put it back, each a walk over every
    /// node, for each start and each order.
    pub(crate) fn rehold(&mut self, id: &Arc<str>, job: &Job, placed: &Placed) {
        self.hold(id, job, placed);
    }

    fn started(&mut self, at: i64, job_id: &str) -> Result<(), Ignored> {
        let (id, job) = self.live(job_id)?;
        let JobStatus::Placed(placed) = &job.status else {
            return Err(Ignored::WrongStatus {
                job_id: job_id.to_owned(),
                event: "job_started",
                status: job.status.name(),
            });
        };
        if placed.started {
            return Err(Ignored::WrongStatus {
                job_id: job_id.to_owned(),
                event: "job_started",
                status: "started",
            });
        }
        let mut placed = placed.clone();
        // A job cannot start before it was placed: a launcher whose clock runs behind the
        // decision service's would otherwise end its protection early, and its job could be
        // ordered off inside its minimum runtime. (A clock running ahead lengthens it; the
        // decision basis holds the placement's time, which is the service's own.)
        placed.start_ms = at.max(placed.start_ms);
        placed.started = true;
        let job = job.clone();
        self.rehold(&id, &job, &placed);
        if let Some(j) = self.jobs.get_mut(&id) {
            j.status = JobStatus::Placed(placed);
        }
        Ok(())
    }

    fn preemption_ordered(&mut self, at: i64, p: &pb::PreemptionOrdered) -> Result<(), Ignored> {
        let (id, job) = self.live(&p.job_id)?;
        let JobStatus::Placed(placed) = &job.status else {
            return Err(Ignored::WrongStatus {
                job_id: p.job_id.clone(),
                event: "preemption_ordered",
                status: job.status.name(),
            });
        };
        let deadline = placed
            .preempt_deadline_ms
            .map_or(p.grace_deadline_ms, |d| d.min(p.grace_deadline_ms));
        // The first order of a run is the one that stops it (a later one can only bring the
        // deadline forward): its reason is the one to explain, with the deadline in force.
        let note = match (&placed.preempt_deadline_ms, &job.last_order) {
            (Some(_), Some(note)) if note.grace_deadline_ms == deadline => Arc::clone(note),
            (Some(_), Some(note)) => Arc::new(OrderNote {
                grace_deadline_ms: deadline,
                ..OrderNote::clone(note)
            }),
            _ => Arc::new(OrderNote {
                ordered_at_ms: at,
                for_job_id: Arc::from(p.for_job_id.as_str()),
                reason: Arc::from(p.reason.as_str()),
                grace_deadline_ms: deadline,
                cause: p.cause,
            }),
        };
        let mut placed = placed.clone();
        placed.preempt_deadline_ms = Some(deadline);
        let job = job.clone();
        self.rehold(&id, &job, &placed);
        // What earlier orders for the same waiter freed stays held until this one's victim is
        // gone too.
        let _ = self.promise_order(at, &note.for_job_id, deadline);
        if let Some(j) = self.jobs.get_mut(&id) {
            j.status = JobStatus::Placed(placed);
            j.last_order = Some(note);
        }
        Ok(())
    }

    fn preempted(&mut self, at: i64, job_id: &str) -> Result<(), Ignored> {
        let (id, job) = self.live(job_id)?;
        let JobStatus::Placed(placed) = &job.status else {
            return Err(Ignored::WrongStatus {
                job_id: job_id.to_owned(),
                event: "job_preempted",
                status: job.status.name(),
            });
        };
        let (job, placed) = (job.clone(), placed.clone());
        self.release(&id, &job, &placed);
        self.note_ended(&job, &placed, at);
        self.promise_freed(at, &id, &placed);
        if job.resumable {
            if let Some(j) = self.jobs.get_mut(&id) {
                j.status = JobStatus::Preempted;
            }
        } else {
            // Not resumable: the job has ended; nothing will requeue it.
            self.jobs.remove(&id);
        }
        Ok(())
    }

    fn requeued(&mut self, job_id: &str) -> Result<(), Ignored> {
        let (id, job) = self.live(job_id)?;
        if job.status != JobStatus::Preempted {
            return Err(Ignored::WrongStatus {
                job_id: job_id.to_owned(),
                event: "job_requeued",
                status: job.status.name(),
            });
        }
        let job = job.clone();
        // Same submit time and priority: the job keeps its place in its team's queue.
        self.enqueue(&id, &job);
        if let Some(j) = self.jobs.get_mut(&id) {
            j.status = JobStatus::Queued;
        }
        Ok(())
    }

    /// Builds the node index from the inventory (after loading a checkpoint, which does not
    /// carry it).
    pub(crate) fn copy_inventory(&mut self) {
        self.registered = NodeIndex::build(&self.inventory, &self.loads);
    }

    /// Brings the node index in step with the inventory's entry for `node`, just changed.
    fn node_changed(&mut self, node: &str) {
        self.registered
            .node_changed(node, self.inventory.nodes().get(node), &self.loads);
        debug_assert_eq!(
            self.registered,
            NodeIndex::build(&self.inventory, &self.loads),
            "the node index moved in step with the inventory"
        );
    }

    /// Fills in every holding's [`Holder`] from the job table, as recording the holdings
    /// did: the one part of the state a checkpoint does not carry.
    pub(crate) fn refill_holders(&mut self) {
        for (id, job) in &self.jobs {
            let JobStatus::Placed(placed) = &job.status else {
                continue;
            };
            let holder = Holder::of(job, placed, self.tree.as_ref());
            for (node, _) in &placed.nodes {
                if let Some(load) = self.loads.get_mut(node)
                    && let Ok(i) = load.holdings.binary_search_by(|(h, _)| (**h).cmp(&**id))
                {
                    load.holdings[i].1.holder = holder.clone();
                }
            }
        }
        for load in self.loads.values_mut() {
            load.recount();
        }
    }

    /// Points every holder at its allocation's account in the tree now in force.
    fn resolve_holder_accounts(&mut self) {
        let tree = self.tree.as_ref();
        for load in self.loads.values_mut() {
            for (_, h) in &mut load.holdings {
                h.holder.account = tree.and_then(|t| t.allocation(&h.holder.allocation));
            }
            load.recount();
        }
    }

    fn ended(&mut self, at: i64, job_id: &str) -> Result<(), Ignored> {
        let (id, job) = self.live(job_id)?;
        let job = job.clone();
        match &job.status {
            JobStatus::Queued => {
                self.dequeue(&id, &job);
                self.drop_promise(&id);
            }
            JobStatus::Placed(placed) => {
                self.release(&id, &job, placed);
                self.note_ended(&job, placed, at);
                self.promise_freed(at, &id, placed);
            }
            JobStatus::Preempted => {}
        }
        self.jobs.remove(&id);
        Ok(())
    }
}
