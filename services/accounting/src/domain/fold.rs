//! The usage fold: `(stream sequence, event)` pairs in, exact window usage out.
//!
//! Place in the flow: the accounting shell reads the `FAIRSHARE_EVENTS` stream in order and
//! hands every event to [`UsageFold::apply`] with its stream sequence; the fold skips anything
//! at or below the last sequence it applied (so a redelivery changes nothing), routes the event
//! to its cluster (named in the body, or remembered from the job's `JobSubmitted`), checks job
//! transitions against the job's state, and updates that cluster's curves and ledger. Queries
//! ([`UsageFold::window`], [`UsageFold::account`], [`UsageFold::ledger`]) read the state for any
//! `now` at or after the cluster's clock and never change it, so the state is a pure function
//! of the events applied: a rebuild from the log equals a restored checkpoint.
//!
//! Job transitions (anything else is ignored and counted, see [`Skip`]):
//!
//! | event                                       | from                        | to        |
//! |---------------------------------------------|-----------------------------|-----------|
//! | `JobSubmitted` (stamped after `clock - W`)  | (an id not seen)            | queued    |
//! | `JobPlaced`                                 | queued                      | placed    |
//! | `JobStarted`                                | placed                      | running   |
//! | `JobPreempted` (resumable job)              | placed, running             | preempted |
//! | `JobPreempted` (not resumable)              | placed, running             | ended     |
//! | `JobRequeued`                               | preempted                   | queued    |
//! | `JobFinished`, `JobFailed`, `JobCancelled`  | queued, placed, running, preempted, overdue | ended |
//! | (its order's grace deadline passes)         | placed, running             | overdue   |
//! | `JobPreempted` (after the deadline)         | overdue                     | preempted, or ended if not resumable |
//!
//! Charging runs from `JobStarted` to the event that stops the job, or to the grace deadline
//! of the `PreemptionOrdered` that stops it, whichever comes first: past its deadline a job
//! counts as killed whether or not its stop was reported (the preemption service reports the
//! kill when it passes next, which after an outage is late). Demand (for the ledger) runs
//! while the job is queued, placed or running, and stops at the deadline too. A deadline takes
//! effect when its cluster's clock reaches it (the next event of the cluster at or after it);
//! queries for a later `now` count it as if it had.
//!
//! Job ids are taken to be unique (the submission service assigns UUIDv7s). An ended job is
//! remembered while its end is inside the window, so a repeated stop or a re-published
//! submission is recognised; after that it is forgotten, and a re-published submission is then
//! refused as stale by its old event time. An id reused for a genuinely new job after that
//! would be accepted as a new job.
//!
//! Event times are clamped per cluster so they never go backwards: an event stamped before its
//! cluster's latest event takes effect at that latest time ([`Applied::Clamped`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use fairshare_events::pb;
use fairshare_events::pb::event::Body;
use fairshare_model::budget::BudgetTree;
use serde::{Deserialize, Serialize};

use fairshare_model::logtime::effective_at;

use super::cluster::ClusterState;
use super::config::FoldConfig;
use super::ids::{JobKey, KeyRef};
use super::jobs::{Job, JobState, JobTable};
use super::outcome::{Applied, FoldCounts, Skip};
use super::report::{AccountUsage, LedgerReport, WindowReport};

/// How far after the stream stored an entry its event may take effect
/// ([`UsageFold::apply_stored`]), the same for every fold that keeps time.
pub use fairshare_model::logtime::MAX_AHEAD_OF_LOG_MS;

/// Why a query could not be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// No event of this cluster was ever applied.
    #[error("no events for cluster {cluster:?} have been folded")]
    UnknownCluster {
        /// The cluster asked for.
        cluster: String,
    },
    /// `now` is before the cluster's last event: the fold cannot look into the past it has
    /// already evicted, and usage up to an earlier time would ignore events it has seen.
    #[error("now ({now} ms) is before cluster {cluster:?}'s last event ({clock} ms)")]
    NowBeforeClock {
        /// The cluster asked for.
        cluster: String,
        /// The time asked for.
        now: i64,
        /// The cluster's clock.
        clock: i64,
    },
}

/// How much the fold holds, to check that memory follows the window and not history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// Clusters known.
    pub clusters: usize,
    /// Account paths interned over all clusters.
    pub paths: usize,
    /// Breakpoints held by usage and capacity curves.
    pub curve_points: usize,
    /// Budget epochs held.
    pub budget_epochs: usize,
    /// Jobs remembered (live ones and ones ended inside the window).
    pub jobs: usize,
    /// Allocations with an open ledger hour.
    pub ledger_active: usize,
}

/// The accounting fold over all clusters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageFold {
    config: FoldConfig,
    /// Last stream sequence applied; 0 before the first (JetStream sequences start at 1).
    last_applied: u64,
    clusters: Vec<ClusterState>,
    cluster_ids: BTreeMap<String, u32>,
    jobs: JobTable,
    /// Grace deadlines of live jobs ordered off, by (cluster, deadline, job): each makes its
    /// job overdue when its cluster's clock reaches it.
    deadlines: BTreeSet<(u32, i64, JobKey)>,
    counts: FoldCounts,
}

fn job_id(body: &Body) -> Option<&str> {
    Some(match body {
        Body::JobPlaced(e) => &e.job_id,
        Body::JobStarted(e) => &e.job_id,
        Body::JobFinished(e) => &e.job_id,
        Body::JobFailed(e) => &e.job_id,
        Body::JobCancelled(e) => &e.job_id,
        Body::JobPreempted(e) => &e.job_id,
        Body::JobRequeued(e) => &e.job_id,
        _ => return None,
    })
}

/// The GPUs a submission holds while running: its accepted shape, or failing that (older
/// producers) its requested GPU count.
fn submitted_gpus(submitted: &pb::JobSubmitted, spec: &pb::JobSpec) -> Option<u64> {
    match &submitted.shape {
        Some(shape) => Some(u64::from(shape.nodes) * u64::from(shape.gpus_per_node)),
        None => u64::try_from(spec.gpus).ok().filter(|&g| g > 0),
    }
}

impl UsageFold {
    /// An empty fold.
    pub fn new(config: FoldConfig) -> UsageFold {
        UsageFold {
            config,
            ..UsageFold::default()
        }
    }

    /// The configuration the fold runs with.
    pub fn config(&self) -> FoldConfig {
        self.config
    }

    /// The last stream sequence applied (0 before any).
    pub fn last_applied(&self) -> u64 {
        self.last_applied
    }

    /// What the fold did with the events so far.
    pub fn counts(&self) -> &FoldCounts {
        &self.counts
    }

    /// Whether every cluster index the fold holds (by name, and on each live job) names one of
    /// its clusters: always so for a fold built by [`Self::apply`]. A checkpoint is input too,
    /// and the fold indexes its clusters by these without a check on every event, so a
    /// damaged one that still decodes is refused with this rather than trusted.
    pub fn links_hold(&self) -> bool {
        let clusters = self.clusters.len();
        let named = self
            .cluster_ids
            .values()
            .all(|&id| (id as usize) < clusters);
        named
            && self.jobs.clusters().all(|id| (id as usize) < clusters)
            && self
                .deadlines
                .iter()
                .all(|(id, ..)| (*id as usize) < clusters)
    }

    /// Applies the event at stream `sequence`. Sequences at or below the last applied one are
    /// skipped; any other event advances the last applied sequence, even when it is ignored.
    pub fn apply(&mut self, sequence: u64, event: &pb::Event) -> Applied {
        self.apply_at(sequence, event, event.at_ms)
    }

    /// [`Self::apply`] for an entry the stream stored at `stored_ms`: the event takes effect
    /// no later than [`MAX_AHEAD_OF_LOG_MS`] after that, whatever its writer's clock said. One
    /// cluster's events share one clock in this fold, so an event stamped far in the future (a
    /// broken clock) would otherwise move it for every job: later events would all take effect
    /// then, charging running jobs until that far time, and new submissions would be refused
    /// as stale. The stored time is part of the log, so a fold from scratch clamps the same.
    pub fn apply_stored(&mut self, sequence: u64, event: &pb::Event, stored_ms: i64) -> Applied {
        let at = effective_at(event.at_ms, Some(stored_ms));
        self.apply_at(sequence, event, at)
    }

    fn apply_at(&mut self, sequence: u64, event: &pb::Event, at: i64) -> Applied {
        let applied = if sequence <= self.last_applied {
            Applied::Skipped(Skip::DuplicateSequence)
        } else {
            self.last_applied = sequence;
            self.apply_body(event, at)
        };
        self.counts.record(applied);
        applied
    }

    fn apply_body(&mut self, event: &pb::Event, at: i64) -> Applied {
        let Some(body) = &event.body else {
            return Applied::NoEffect;
        };
        if let Some(id) = job_id(body) {
            return self.job_event(id, at, body);
        }
        match body {
            Body::JobSubmitted(s) => self.submitted(at, s),
            Body::BudgetTreeSet(b) => match BudgetTree::from_accounts(&b.accounts) {
                Ok(tree) => {
                    let cluster = self.cluster_mut(&b.cluster);
                    let (t, clamped) = self.advance(cluster, at);
                    self.clusters[cluster].set_budget(t, &tree);
                    changed(clamped)
                }
                Err(_) => Applied::Skipped(Skip::InvalidBudgetTree),
            },
            Body::NodeRegistered(n) => {
                let cluster = self.cluster_mut(&n.cluster);
                let (t, clamped) = self.advance(cluster, at);
                self.clusters[cluster].register_node(t, &n.node, n.gpus);
                changed(clamped)
            }
            Body::NodeRemoved(n) => {
                let Some(&cluster) = self.cluster_ids.get(&n.cluster) else {
                    return Applied::Skipped(Skip::UnknownNode);
                };
                let cluster = cluster as usize;
                if !self.clusters[cluster].has_node(&n.node) {
                    return Applied::Skipped(Skip::UnknownNode);
                }
                let (t, clamped) = self.advance(cluster, at);
                self.clusters[cluster].remove_node(t, &n.node);
                changed(clamped)
            }
            Body::PreemptionOrdered(o) => self.ordered(o),
            _ => Applied::NoEffect,
        }
    }

    /// A preemption order: its job, placed or running, counts as killed at its grace deadline
    /// (the earliest, if ordered again) unless it stops before. The order itself moves no clock.
    fn ordered(&mut self, o: &pb::PreemptionOrdered) -> Applied {
        let key = KeyRef::of(&o.job_id);
        let Some(job) = self.jobs.get_mut(key) else {
            return Applied::NoEffect;
        };
        if !matches!(job.state, JobState::Placed | JobState::Running)
            || job.deadline_ms.is_some_and(|d| d <= o.grace_deadline_ms)
        {
            return Applied::NoEffect;
        }
        if let Some(earlier) = job.deadline_ms.replace(o.grace_deadline_ms) {
            self.deadlines
                .remove(&(job.cluster, earlier, key.to_owned()));
        }
        self.deadlines
            .insert((job.cluster, o.grace_deadline_ms, key.to_owned()));
        Applied::Changed
    }

    /// Makes every job of `cluster` whose grace deadline is at or before `at` overdue, in
    /// deadline order, each stopping at its deadline (or the clock, if that is later).
    fn pass_deadlines(&mut self, cluster: usize, at: i64) {
        let Ok(id) = u32::try_from(cluster) else {
            return;
        };
        loop {
            let due = self
                .deadlines
                .range((id, i64::MIN, JobKey::Uuid(0))..)
                .next()
                .filter(|(c, d, _)| *c == id && *d <= at)
                .cloned();
            let Some(entry) = due else { break };
            self.deadlines.remove(&entry);
            let (_, deadline, key) = entry;
            let Some(job) = self.jobs.get_mut(key.as_ref()) else {
                continue;
            };
            let before = *job;
            if !matches!(before.state, JobState::Placed | JobState::Running) {
                continue;
            }
            job.state = JobState::Overdue;
            let window = self.config.window();
            if let Some(state) = self.clusters.get_mut(cluster) {
                let (t, _) = state.advance(deadline, window);
                state.stopped(t, &before, before.state);
            }
        }
    }

    /// Forgets job `key`'s deadline: its run stopped (or it became overdue) before it.
    fn drop_deadline(&mut self, key: KeyRef<'_>, job: &Job) {
        if let Some(deadline) = job.deadline_ms {
            self.deadlines
                .remove(&(job.cluster, deadline, key.to_owned()));
        }
    }

    /// The index of cluster `name`, creating it on first sight.
    fn cluster_mut(&mut self, name: &str) -> usize {
        if let Some(&id) = self.cluster_ids.get(name) {
            return id as usize;
        }
        let id = self.clusters.len();
        self.clusters.push(ClusterState::new(name));
        // Jobs store their cluster as u32; four billion cluster names cannot come from a real
        // log, and saturating keeps the fold total rather than panicking.
        self.cluster_ids
            .insert(name.to_owned(), u32::try_from(id).unwrap_or(u32::MAX));
        id
    }

    fn submitted(&mut self, at: i64, s: &pb::JobSubmitted) -> Applied {
        let Some(spec) = &s.spec else {
            return Applied::Skipped(Skip::Malformed);
        };
        if spec.min_runtime_s < 0 {
            return Applied::Skipped(Skip::Malformed);
        }
        let Some(gpus) = submitted_gpus(s, spec) else {
            return Applied::Skipped(Skip::Malformed);
        };
        let known = self.cluster_ids.get(&spec.cluster).map(|&id| id as usize);
        let clock = known.and_then(|id| self.clusters.get(id)?.clock());
        if clock.is_some_and(|clock| at <= clock.saturating_sub(self.config.window())) {
            return Applied::Skipped(Skip::StaleSubmit);
        }
        let key = KeyRef::of(&s.job_id);
        if self.jobs.contains(key) || self.is_ended(key) {
            return Applied::Skipped(Skip::DuplicateSubmit);
        }
        let cluster = match known {
            Some(id) => id,
            None => self.cluster_mut(&spec.cluster),
        };
        let (t, clamped) = self.advance(cluster, at);
        let allocated = spec.min_runtime_s > 0;
        let state = &mut self.clusters[cluster];
        // Unallocated jobs charge no allocation, so their path is not interned.
        let allocation = if allocated {
            state.allocation(&spec.allocation)
        } else {
            0
        };
        let job = Job {
            cluster: u32::try_from(cluster).unwrap_or(u32::MAX),
            allocation,
            gpus,
            allocated,
            resumable: spec.resumable,
            state: JobState::Queued,
            deadline_ms: None,
        };
        state.queued(t, &job);
        self.jobs.insert(key, job);
        changed(clamped)
    }

    /// Whether the job keyed `key` ended recently (in any cluster: job ids are global).
    fn is_ended(&self, key: KeyRef<'_>) -> bool {
        self.clusters.iter().any(|c| c.ended.contains(key))
    }

    fn job_event(&mut self, id: &str, at: i64, body: &Body) -> Applied {
        let key = KeyRef::of(id);
        // Deadlines passed by now first: the transition must start from the job's state then
        // (a kill stamped after its deadline finds the job overdue already).
        if !self.deadlines.is_empty()
            && let Some(cluster) = self.jobs.get(key).map(|j| j.cluster as usize)
        {
            self.pass_deadlines(cluster, at);
        }
        // One lookup: the transition is checked and recorded on the entry in place.
        let Some(entry) = self.jobs.get_mut(key) else {
            if !self.is_ended(key) {
                return Applied::Skipped(Skip::UnknownJob);
            }
            return Applied::Skipped(match body {
                Body::JobPlaced(_) => Skip::PlaceNotQueued,
                Body::JobStarted(_) => Skip::StartNotPlaced,
                Body::JobPreempted(_) => Skip::PreemptNotRunning,
                Body::JobRequeued(_) => Skip::RequeueNotPreempted,
                _ => Skip::AlreadyEnded,
            });
        };
        let job = *entry;
        let next = match (body, job.state) {
            (Body::JobPlaced(_), JobState::Queued) => JobState::Placed,
            (Body::JobPlaced(_), _) => return Applied::Skipped(Skip::PlaceNotQueued),
            // Only what a placement named: a start of a queued job (a launcher's mistake, or one
            // forging starts to charge another team) is refused, as the decision service
            // refuses it; charging it would make the two disagree on what runs.
            (Body::JobStarted(_), JobState::Placed) => JobState::Running,
            (Body::JobStarted(_), _) => return Applied::Skipped(Skip::StartNotPlaced),
            // A placed job ordered off before its launcher started it is preempted too (the
            // decision service releases it the same way). Without resuming, nothing will
            // requeue it: it has ended, as the decision service and the launcher hold.
            (Body::JobPreempted(_), JobState::Running | JobState::Placed | JobState::Overdue)
                if job.resumable =>
            {
                JobState::Preempted
            }
            (Body::JobPreempted(_), JobState::Running | JobState::Placed | JobState::Overdue) => {
                JobState::Ended
            }
            (Body::JobPreempted(_), _) => return Applied::Skipped(Skip::PreemptNotRunning),
            (Body::JobRequeued(_), JobState::Preempted) => JobState::Queued,
            (Body::JobRequeued(_), _) => return Applied::Skipped(Skip::RequeueNotPreempted),
            // Ended jobs live in their cluster's ended set, never here; kept for totality.
            (_, JobState::Ended) => return Applied::Skipped(Skip::AlreadyEnded),
            // Finished, failed or cancelled from queued, running, preempted or overdue.
            _ => JobState::Ended,
        };
        // The run an order's deadline was for is over.
        let run_over = matches!(
            next,
            JobState::Preempted | JobState::Ended | JobState::Queued
        );
        if next == JobState::Ended {
            self.jobs.remove(key);
        } else {
            entry.state = next;
            if run_over {
                entry.deadline_ms = None;
            }
        }
        if run_over {
            self.drop_deadline(key, &job);
        }
        let cluster = job.cluster as usize;
        let (t, clamped) = self.advance(cluster, at);
        // A job's cluster always exists (it was created by the job's submission).
        let Some(state) = self.clusters.get_mut(cluster) else {
            return Applied::Skipped(Skip::UnknownJob);
        };
        match next {
            // Still waiting, as far as demand goes: nothing to charge or count anew. (Only a
            // passed deadline makes a job overdue, never an event.)
            JobState::Placed | JobState::Overdue => {}
            JobState::Running => state.started(t, &job),
            JobState::Queued => state.queued(t, &job),
            JobState::Preempted | JobState::Ended => state.stopped(t, &job, job.state),
        }
        if next == JobState::Ended {
            state.remember_end(t, key);
        }
        changed(clamped)
    }

    /// Usage of every allocation and subtree of `cluster` inside `[now - W, now]`.
    pub fn window(&self, cluster: &str, now: i64) -> Result<WindowReport, QueryError> {
        let state = self.queryable(cluster, now)?;
        Ok(state.window_report(now, self.config.window()))
    }

    /// Usage of the account at `path` (an allocation, or an inner account with everything below
    /// it) inside `[now - W, now]`.
    pub fn account(&self, cluster: &str, path: &str, now: i64) -> Result<AccountUsage, QueryError> {
        let state = self.queryable(cluster, now)?;
        Ok(state.account_usage(path, now, self.config.window()))
    }

    /// GPU-ms run by unallocated jobs of `cluster` inside `[now - W, now]`.
    pub fn unallocated(&self, cluster: &str, now: i64) -> Result<u128, QueryError> {
        let state = self.queryable(cluster, now)?;
        Ok(state.unallocated_usage(now, self.config.window()))
    }

    /// The owed/delivered ledger of `cluster` over every hour ended by `now`.
    pub fn ledger(&self, cluster: &str, now: i64) -> Result<LedgerReport, QueryError> {
        let state = self.queryable(cluster, now)?;
        Ok(state.ledger_report(now))
    }

    /// The state of `cluster`, if any event of it was folded.
    pub fn cluster(&self, cluster: &str) -> Option<&ClusterState> {
        let id = *self.cluster_ids.get(cluster)?;
        self.clusters.get(id as usize)
    }

    /// The cluster of live job `job_id` (submitted, not ended), if the fold holds it.
    pub fn job_cluster(&self, job_id: &str) -> Option<&str> {
        let job = self.jobs.get(KeyRef::of(job_id))?;
        self.clusters
            .get(job.cluster as usize)
            .map(ClusterState::name)
    }

    /// Names of every cluster seen, sorted.
    pub fn cluster_names(&self) -> impl Iterator<Item = &str> {
        self.cluster_ids.keys().map(String::as_str)
    }

    /// The state of `cluster` as of `now`: with the grace deadlines before `now` that no event
    /// has reached yet taken (on a copy: queries change nothing), so a job past its deadline
    /// is not charged on to `now` because the cluster has been quiet since.
    fn queryable(&self, cluster: &str, now: i64) -> Result<Cow<'_, ClusterState>, QueryError> {
        let id = *self
            .cluster_ids
            .get(cluster)
            .ok_or_else(|| QueryError::UnknownCluster {
                cluster: cluster.to_owned(),
            })?;
        let state = self
            .clusters
            .get(id as usize)
            .ok_or_else(|| QueryError::UnknownCluster {
                cluster: cluster.to_owned(),
            })?;
        if let Some(clock) = state.clock()
            && now < clock
        {
            return Err(QueryError::NowBeforeClock {
                cluster: cluster.to_owned(),
                now,
                clock,
            });
        }
        let mut passed = self
            .deadlines
            .range((id, i64::MIN, JobKey::Uuid(0))..)
            .take_while(|(c, d, _)| *c == id && *d < now)
            .peekable();
        if passed.peek().is_none() {
            return Ok(Cow::Borrowed(state));
        }
        let mut copy = state.clone();
        let window = self.config.window();
        for (_, deadline, key) in passed {
            if let Some(job) = self.jobs.get(key.as_ref())
                && matches!(job.state, JobState::Placed | JobState::Running)
            {
                let (t, _) = copy.advance(*deadline, window);
                copy.stopped(t, job, job.state);
            }
        }
        Ok(Cow::Owned(copy))
    }

    /// How much the fold holds now.
    pub fn footprint(&self) -> Footprint {
        let mut f = Footprint {
            clusters: self.clusters.len(),
            jobs: self.jobs.len(),
            ..Footprint::default()
        };
        for c in &self.clusters {
            f.paths += c.paths.len();
            f.curve_points += c.usage.iter().map(|u| u.len()).sum::<usize>()
                + c.unallocated.len()
                + c.capacity.curve.len();
            f.budget_epochs += c.budget.len();
            f.ledger_active += c.ledger.active_len();
            f.jobs += c.ended.len();
        }
        f
    }

    /// Moves `cluster`'s clock to an event at `at` (see [`ClusterState`]), passing the grace
    /// deadlines on the way.
    fn advance(&mut self, cluster: usize, at: i64) -> (i64, bool) {
        if !self.deadlines.is_empty() {
            self.pass_deadlines(cluster, at);
        }
        let window = self.config.window();
        match self.clusters.get_mut(cluster) {
            Some(state) => state.advance(at, window),
            None => (at, false),
        }
    }
}

fn changed(clamped: bool) -> Applied {
    if clamped {
        Applied::Clamped
    } else {
        Applied::Changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::tests::support::{node, submit};

    #[test]
    fn a_fold_whose_cluster_links_are_broken_says_so() {
        let mut fold = UsageFold::new(FoldConfig::default());
        fold.apply(1, &node(0, "c", "n1", 8));
        fold.apply(2, &submit(0, "j", "c", "a", 1, 1, 60));
        assert!(fold.links_hold());
        // A checkpoint that decodes but names a cluster it does not hold.
        let mut by_name = fold.clone();
        by_name.cluster_ids.insert("d".into(), 7);
        assert!(!by_name.links_hold());
        let mut by_job = fold.clone();
        by_job.clusters.clear();
        by_job.cluster_ids.clear();
        assert!(!by_job.links_hold(), "the live job still names cluster 0");
    }
}
