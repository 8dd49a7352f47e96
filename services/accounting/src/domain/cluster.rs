//! One cluster's accounting state, and the state changes the fold drives on it.
//!
//! Place in the flow: the fold ([`super::fold`]) decodes what an event means (which job, which
//! transition) and calls one of the methods here with the event's effective time. The cluster
//! owns its clock: event times are clamped so they never go backwards, which keeps every curve
//! append-only. Whenever the clock enters a new hour, the ledger closes the hours before it;
//! once per sweep period (W/8, between 1 and 24 hours) everything wholly before `clock - W` is
//! evicted, so memory follows the window (plus at most a period), not history.

use fairshare_model::budget::BudgetTree;
use serde::{Deserialize, Serialize};

use super::budget::{BudgetHistory, Epoch};
use super::capacity::Capacity;
use super::curve::Curve;
use super::ended::EndedJobs;
use super::ids::KeyRef;
use super::jobs::{Job, JobState};
use super::ledger::{HOUR_MS, Ledger, RateChange, hour_of};
use super::paths::{PathId, Paths};

/// Accounting state of one GPU cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    /// Cluster name, as events spell it.
    pub(crate) name: String,
    /// Latest effective event time; `None` before the first event.
    pub(crate) clock: Option<i64>,
    /// Account and allocation paths.
    pub(crate) paths: Paths,
    /// Charged GPU-ms of allocated jobs, by allocation id.
    pub(crate) usage: Vec<Curve>,
    /// GPU-ms run by unallocated jobs.
    pub(crate) unallocated: Curve,
    /// Registered nodes and capacity over time.
    pub(crate) capacity: Capacity,
    /// Budget trees over time.
    pub(crate) budget: BudgetHistory,
    /// Hourly owed/delivered ledger.
    pub(crate) ledger: Ledger,
    /// Ended jobs still remembered (forgotten once outside the window).
    pub(crate) ended: EndedJobs,
    /// The hour of the last eviction sweep.
    pub(crate) swept_hour: Option<i64>,
}

/// Hours between eviction sweeps for a window of `window` ms: W/8, at least 1, at most 24.
fn sweep_hours(window: i64) -> i64 {
    (window / (8 * HOUR_MS)).clamp(1, 24)
}

fn gpus(job: &Job) -> i128 {
    i128::from(job.gpus)
}

impl ClusterState {
    /// An empty cluster named `name`.
    pub fn new(name: &str) -> ClusterState {
        ClusterState {
            name: name.to_owned(),
            ..ClusterState::default()
        }
    }

    /// Moves the clock to an event at `at_ms` and returns the time the event takes effect (never
    /// before the clock) and whether it had to be clamped. Entering a new hour closes the
    /// ledger's hours and evicts what the window no longer covers.
    pub(crate) fn advance(&mut self, at_ms: i64, window: i64) -> (i64, bool) {
        let (t, clamped) = match self.clock {
            Some(clock) if at_ms < clock => (clock, true),
            _ => (at_ms, false),
        };
        self.clock = Some(t);
        let hour = hour_of(t);
        if self.ledger.open_hour() != Some(hour) {
            self.ledger
                .close_through(hour, &self.budget, &self.capacity.curve);
            // Sweeping touches every allocation's curve, so it runs once per sweep period (an
            // eighth of the window, 1 to 24 hours), not every hour: memory stays within
            // W + W/8 (+ 1 h) of history, and the sweep's cost per event stays negligible.
            let period = sweep_hours(window);
            if self
                .swept_hour
                .is_none_or(|last| hour >= last.saturating_add(period))
            {
                self.swept_hour = Some(hour);
                // Queries come with `now >= t`, so nothing before `t - W` is asked for again;
                // the open hour is still needed whole by the ledger.
                let bound = t.saturating_sub(window).min(hour.saturating_mul(HOUR_MS));
                self.evict_through(bound);
            }
        }
        (t, clamped)
    }

    fn evict_through(&mut self, bound: i64) {
        for curve in &mut self.usage {
            curve.evict_through(bound);
        }
        self.unallocated.evict_through(bound);
        self.capacity.curve.evict_through(bound);
        self.budget.evict_through(bound);
        self.ended.sweep(bound);
    }

    /// The id of allocation `path`, interning it.
    pub(crate) fn allocation(&mut self, path: &str) -> PathId {
        let id = self.paths.intern(path);
        if self.usage.len() <= id as usize {
            self.usage.resize(id as usize + 1, Curve::default());
        }
        id
    }

    /// A job entered the queue (submitted or requeued) at `t`.
    pub(crate) fn queued(&mut self, t: i64, job: &Job) {
        if job.allocated {
            let change = RateChange {
                demand: gpus(job),
                run: 0,
            };
            self.ledger.change(job.allocation, t, change);
        }
    }

    /// A queued job started at `t`: charging begins.
    pub(crate) fn started(&mut self, t: i64, job: &Job) {
        if job.allocated {
            if let Some(curve) = self.usage.get_mut(job.allocation as usize) {
                curve.add(t, job.gpus);
            }
            let change = RateChange {
                demand: 0,
                run: gpus(job),
            };
            self.ledger.change(job.allocation, t, change);
        } else {
            self.unallocated.add(t, job.gpus);
            self.ledger.change_unallocated(t, gpus(job));
        }
    }

    /// A job in state `from` stopped at `t` (ended, or preempted when `from` is running or
    /// placed, or killed by its grace deadline). An overdue job stopped at its deadline
    /// already: nothing changes.
    pub(crate) fn stopped(&mut self, t: i64, job: &Job, from: JobState) {
        if from == JobState::Overdue {
            return;
        }
        let running = from == JobState::Running;
        if job.allocated {
            if running && let Some(curve) = self.usage.get_mut(job.allocation as usize) {
                curve.sub(t, job.gpus);
            }
            let waiting_or_running = matches!(
                from,
                JobState::Queued | JobState::Placed | JobState::Running
            );
            let change = RateChange {
                demand: if waiting_or_running { -gpus(job) } else { 0 },
                run: if running { -gpus(job) } else { 0 },
            };
            self.ledger.change(job.allocation, t, change);
        } else if running {
            self.unallocated.sub(t, job.gpus);
            self.ledger.change_unallocated(t, -gpus(job));
        }
    }

    /// Remembers that the job keyed `key` ended at `t`, so it is forgotten once outside the
    /// window.
    pub(crate) fn remember_end(&mut self, t: i64, key: KeyRef<'_>) {
        self.ended.insert(t, key);
    }

    /// A valid budget tree takes effect at `t`.
    pub(crate) fn set_budget(&mut self, t: i64, tree: &BudgetTree) {
        let epoch = Epoch::from_tree(t, tree, &mut self.paths);
        if self.usage.len() < self.paths.len() {
            self.usage.resize(self.paths.len(), Curve::default());
        }
        self.budget.push(epoch);
    }

    /// Whether `node` is registered now.
    pub(crate) fn has_node(&self, node: &str) -> bool {
        self.capacity.has(node)
    }

    /// Registers (or resizes) a node at `t`.
    pub(crate) fn register_node(&mut self, t: i64, node: &str, gpus: u32) {
        self.capacity.register(t, node, gpus);
    }

    /// Removes a registered node at `t`.
    pub(crate) fn remove_node(&mut self, t: i64, node: &str) {
        self.capacity.remove(t, node);
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Latest effective event time, `None` before the first event.
    pub fn clock(&self) -> Option<i64> {
        self.clock
    }

    /// GPUs registered now.
    pub fn capacity_gpus(&self) -> u64 {
        self.capacity.gpus()
    }

    /// Whether `path` names an account (allocation or inner) of the budget tree in force now;
    /// for refusing queries about accounts that do not exist.
    pub fn has_account(&self, path: &str) -> bool {
        self.paths
            .get(path)
            .is_some_and(|id| self.budget.has_current(id))
    }
}
