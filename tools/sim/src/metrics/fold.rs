//! One pass over a policy's log: the integrals, waits and counts of [`RunMetrics`].
//!
//! Time-weighted figures (occupancy, idle while waiting, the hourly series) integrate
//! piecewise-constant cluster state between event times, so the order of events sharing a
//! time does not matter. Owed and delivered are read from the accounting fold's ledger, fed
//! the same log.

use std::collections::{BTreeMap, HashMap};

use fairshare_accounting::domain::{FoldConfig, UsageFold};
use fairshare_events::pb::{self, PreemptionCause, event::Body};
use fairshare_model::budget::BudgetTree;
use fairshare_model::hour::HOUR_MS;
use fairshare_model::shape::Shape;
use fairshare_preemption::domain::Config as ContractConfig;
use fairshare_preemption::domain::contract;

use super::idle::Holes;
use super::missed::MissedOwed;
use super::{AllocationMetrics, CausePreemptions, HourPoint, RunMetrics, Waits};
use crate::workload::JobClass;

/// What measuring needs besides the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeasureConfig {
    /// Start of the run (the hourly series counts hours from it).
    pub start_ms: i64,
    /// End of the run: the integrals stop here; jobs not started by then count their wait so
    /// far.
    pub end_ms: i64,
    /// Checkpoint interval and minimum-runtime cap for lost work and violations.
    pub contract: ContractConfig,
    /// The accounting fold's window (only its ledger is read here).
    pub window: FoldConfig,
}

/// A job as the measurement follows it.
struct Tracked {
    /// Its number in the measurement (the idle split keys holders by it).
    serial: u32,
    submit_ms: i64,
    gpus: u64,
    shape: Shape,
    /// `(node index, GPUs)` of its current placement, while placed or running.
    placed_on: Vec<(u32, u32)>,
    /// Placed and not started yet.
    pending: bool,
    class: JobClass,
    min_runtime_ms: i64,
    resumable: bool,
    /// Start of the first run.
    first_start_ms: Option<i64>,
    /// Start of the current run, while running.
    running_since: Option<i64>,
    /// Waiting to be placed.
    queued: bool,
    ended: bool,
    /// When it ended before it ever started (cancelled or failed while waiting).
    ended_unstarted_ms: Option<i64>,
    /// The cause of its latest preemption order, which its stop is filed under.
    order_cause: PreemptionCause,
}

/// Cluster-wide GPU counts between events.
#[derive(Default)]
struct Levels {
    /// GPUs of open nodes (registered, not cordoned).
    capacity: u64,
    /// GPUs running work, on any node.
    used: u64,
    /// GPUs running work on closed nodes (cordoned, or left service), which runs on until
    /// its jobs stop: counted as available too, so `used` never exceeds `available`.
    closed_used: u64,
    unallocated_used: u64,
    queued: u64,
}

impl Levels {
    /// GPUs that could run work: the open nodes', and those still running work elsewhere.
    fn available(&self) -> u64 {
        self.capacity.saturating_add(self.closed_used)
    }

    /// Whether queued work exceeds idle GPUs: the time occupancy is judged over.
    fn contended(&self) -> bool {
        self.queued > self.available().saturating_sub(self.used)
    }
}

/// The running integrals.
#[derive(Default)]
struct Integrals {
    used: u128,
    available: u128,
    contention_used: u128,
    contention_available: u128,
    unallocated: u128,
    idle_while_waiting: u128,
    hourly: Vec<HourPoint>,
}

impl Integrals {
    fn add(&mut self, levels: &Levels, from: i64, to: i64, start_ms: i64) {
        if to <= from {
            return;
        }
        let dt = u128::try_from(to - from).unwrap_or(0);
        let used = u128::from(levels.used);
        let capacity = u128::from(levels.available());
        let idle = levels.available().saturating_sub(levels.used);
        self.used += used * dt;
        self.available += capacity * dt;
        self.unallocated += u128::from(levels.unallocated_used) * dt;
        if levels.contended() {
            self.contention_used += used * dt;
            self.contention_available += capacity * dt;
        }
        if levels.queued > 0 {
            self.idle_while_waiting += u128::from(idle.min(levels.queued)) * dt;
        }
        self.add_hourly(levels, from, to, start_ms);
    }

    /// Splits `[from, to)` over the hours since `start_ms` it touches.
    fn add_hourly(&mut self, levels: &Levels, from: i64, to: i64, start_ms: i64) {
        // Hours of the run (from `start_ms`), for the occupancy chart.
        let mut t = from;
        while t < to {
            let hour = (t - start_ms).max(0) / HOUR_MS;
            let hour_end = (start_ms + (hour + 1) * HOUR_MS).min(to);
            let dt = u128::try_from(hour_end - t).unwrap_or(0);
            let idx = usize::try_from(hour).unwrap_or(usize::MAX);
            while self.hourly.len() <= idx {
                let next = self.hourly.len() as u64;
                self.hourly.push(HourPoint {
                    hour: next,
                    used_gpu_ms: 0,
                    capacity_gpu_ms: 0,
                });
            }
            let point = &mut self.hourly[idx];
            point.used_gpu_ms += u128::from(levels.used) * dt;
            point.capacity_gpu_ms += u128::from(levels.available()) * dt;
            t = hour_end;
        }
    }
}

/// Per-node state the capacity depends on.
#[derive(Default, Clone, Copy)]
struct NodeState {
    gpus: u64,
    cordoned: bool,
}

/// Everything the fold keeps while walking the log.
struct Measure<'c> {
    config: &'c MeasureConfig,
    jobs: HashMap<String, Tracked>,
    nodes: HashMap<String, NodeState>,
    levels: Levels,
    integrals: Integrals,
    clock: i64,
    out: RunMetrics,
    /// Preemptions by the orders' cause (the map's order is the report's).
    by_cause: BTreeMap<PreemptionCause, CausePreemptions>,
    usage: UsageFold,
    /// Owed time missed, split by what the window said (see [`MissedOwed`]).
    missed: MissedOwed,
    /// Where idle GPUs went under contention (see [`Holes`]).
    holes: Holes,
    /// Per node (the split's index), the maintenance windows scheduled on it: `(scheduled at,
    /// window start, window end)`, for telling a window's cut from a violation.
    windows: HashMap<u32, Vec<(i64, i64, i64)>>,
    tree: Option<BudgetTree>,
}

impl NodeState {
    /// GPUs it adds to the open capacity.
    fn open_gpus(&self) -> u64 {
        if self.cordoned { 0 } else { self.gpus }
    }
}

impl Measure<'_> {
    fn advance(&mut self, to: i64) {
        let to = to.min(self.config.end_ms);
        if to > self.clock {
            self.integrals
                .add(&self.levels, self.clock, to, self.config.start_ms);
            if self.levels.contended() {
                self.holes.add(self.clock, to);
            }
            self.clock = to;
        }
    }

    fn stop_run(&mut self, job_id: &str) -> Option<(i64, u64, bool)> {
        let job = self.jobs.get_mut(job_id)?;
        let since = job.running_since.take()?;
        self.levels.used = self.levels.used.saturating_sub(job.gpus);
        if job.class == JobClass::Unallocated {
            self.levels.unallocated_used = self.levels.unallocated_used.saturating_sub(job.gpus);
        }
        Some((since, job.gpus, job.resumable))
    }

    fn leave_queue(&mut self, job_id: &str) {
        if let Some(job) = self.jobs.get_mut(job_id)
            && job.queued
        {
            job.queued = false;
            self.levels.queued = self.levels.queued.saturating_sub(job.gpus);
            self.holes
                .queue(job.shape, job.class != JobClass::Unallocated, false);
        }
    }

    fn placed(&mut self, p: &pb::JobPlaced) {
        self.leave_queue(&p.job_id);
        self.release_nodes(&p.job_id);
        let Some(job) = self.jobs.get_mut(&p.job_id) else {
            return;
        };
        for n in &p.nodes {
            let idx = self.holes.node(&n.node);
            self.holes.pending(idx, n.gpus, true);
            job.placed_on.push((idx, n.gpus));
        }
        job.pending = true;
    }

    /// Gives back the nodes a job was placed on or ran on.
    fn release_nodes(&mut self, job_id: &str) {
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        for (idx, gpus) in job.placed_on.drain(..) {
            if job.pending {
                self.holes.pending(idx, gpus, false);
            } else {
                self.holes.stop(idx, job.serial);
            }
        }
        job.pending = false;
    }

    fn end_job(&mut self, now: i64, job_id: &str, finished: bool) {
        self.leave_queue(job_id);
        self.release_nodes(job_id);
        self.stop_run(job_id);
        if let Some(job) = self.jobs.get_mut(job_id)
            && !job.ended
        {
            job.ended = true;
            if job.first_start_ms.is_none() {
                job.ended_unstarted_ms = Some(now);
            }
            if finished {
                self.out.jobs_finished += 1;
            }
        }
    }

    fn apply(&mut self, event: &pb::Event) {
        let now = event.at_ms;
        match &event.body {
            Some(Body::BudgetTreeSet(b)) => {
                self.tree = BudgetTree::from_accounts(&b.accounts)
                    .ok()
                    .or(self.tree.take());
            }
            Some(Body::NodeRegistered(n)) => {
                let cordoned = self.nodes.get(&n.node).is_some_and(|s| s.cordoned);
                let state = NodeState {
                    gpus: u64::from(n.gpus),
                    cordoned,
                };
                self.set_node(&n.node, Some(state));
                self.holes.set_node(&n.node, n.gpus, cordoned);
            }
            Some(Body::NodeCordoned(n)) => self.set_cordoned(&n.node, true),
            Some(Body::NodeUncordoned(n)) => self.set_cordoned(&n.node, false),
            Some(Body::NodeRemoved(n)) => {
                // Gone, cordon and all: registered again, it is open.
                self.set_node(&n.node, None);
                self.holes.set_node(&n.node, 0, false);
            }
            Some(Body::JobSubmitted(s)) => self.submitted(s, now),
            Some(Body::JobPlaced(p)) => self.placed(p),
            Some(Body::JobStarted(s)) => self.started(&s.job_id, now),
            Some(Body::JobFinished(f)) => self.end_job(now, &f.job_id, true),
            Some(Body::JobFailed(f)) => self.end_job(now, &f.job_id, false),
            Some(Body::JobCancelled(c)) => self.end_job(now, &c.job_id, false),
            // A cause this code does not know (a newer writer's) is filed as unspecified.
            Some(Body::PreemptionOrdered(o)) => self.ordered(&o.job_id, o.cause(), now),
            Some(Body::JobPreempted(p)) => self.preempted(&p.job_id, now),
            Some(Body::JobRequeued(r)) => {
                if let Some(job) = self.jobs.get_mut(&r.job_id)
                    && !job.ended
                    && !job.queued
                    && job.running_since.is_none()
                {
                    job.queued = true;
                    self.levels.queued += job.gpus;
                    self.holes
                        .queue(job.shape, job.class != JobClass::Unallocated, true);
                }
            }
            Some(Body::MaintenanceScheduled(w)) => {
                for node in &w.nodes {
                    let i = self.holes.node(node);
                    self.windows
                        .entry(i)
                        .or_default()
                        .push((now, w.start_ms, w.end_ms));
                }
            }
            Some(Body::MaintenanceCancelled(w)) => {
                // Orders given while it stood were judged then; none after it are excused by it.
                for node in &w.nodes {
                    let i = self.holes.node(node);
                    if let Some(windows) = self.windows.get_mut(&i) {
                        windows.retain(|&(_, start, end)| (start, end) != (w.start_ms, w.end_ms));
                    }
                }
            }
            Some(Body::JobRejected(_))
            | Some(Body::NodeDrained(_) | Body::UsageSnapshot(_))
            | None => {}
        }
    }

    /// Registers, changes (`Some`) or removes (`None`) a node, and moves the open capacity by
    /// the difference: one node at a time, so a cluster registered node by node is not summed
    /// again at each (100,000 nodes took minutes that way).
    fn set_node(&mut self, node: &str, state: Option<NodeState>) {
        let before = match state {
            Some(state) => self.nodes.insert(node.to_owned(), state),
            None => self.nodes.remove(node),
        };
        let capacity = &mut self.levels.capacity;
        *capacity = capacity.saturating_sub(before.as_ref().map_or(0, NodeState::open_gpus));
        *capacity = capacity.saturating_add(state.as_ref().map_or(0, NodeState::open_gpus));
    }

    /// Cordons or uncordons a registered node (an unknown one is left alone, as the services'
    /// folds leave it).
    fn set_cordoned(&mut self, node: &str, cordoned: bool) {
        let Some(&NodeState { gpus, .. }) = self.nodes.get(node) else {
            return;
        };
        self.set_node(node, Some(NodeState { gpus, cordoned }));
        self.holes
            .set_node(node, u32::try_from(gpus).unwrap_or(u32::MAX), cordoned);
    }

    fn submitted(&mut self, s: &pb::JobSubmitted, now: i64) {
        let Some(spec) = &s.spec else { return };
        let gpus = u64::try_from(spec.gpus).unwrap_or(0);
        let min_runtime_ms = spec.min_runtime_s.saturating_mul(1000);
        let class = JobClass::of(gpus, min_runtime_ms);
        let shape = s.shape.as_ref().map_or_else(
            || Shape {
                nodes: 1,
                gpus_per_node: u32::try_from(gpus).unwrap_or(u32::MAX),
            },
            |sh| Shape {
                nodes: sh.nodes,
                gpus_per_node: sh.gpus_per_node,
            },
        );
        self.out.jobs_submitted += 1;
        self.levels.queued += gpus;
        self.holes
            .queue(shape, class != JobClass::Unallocated, true);
        let serial = u32::try_from(self.jobs.len()).unwrap_or(u32::MAX);
        self.jobs.insert(
            s.job_id.clone(),
            Tracked {
                serial,
                submit_ms: now,
                gpus,
                shape,
                placed_on: Vec::new(),
                pending: false,
                class,
                min_runtime_ms,
                resumable: spec.resumable,
                first_start_ms: None,
                running_since: None,
                queued: true,
                ended: false,
                ended_unstarted_ms: None,
                order_cause: PreemptionCause::Unspecified,
            },
        );
    }

    fn started(&mut self, job_id: &str, now: i64) {
        self.leave_queue(job_id);
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        if job.ended || job.running_since.is_some() {
            return;
        }
        job.running_since = Some(now);
        job.first_start_ms.get_or_insert(now);
        if job.pending {
            job.pending = false;
            let unallocated = job.class == JobClass::Unallocated;
            let protected_until =
                contract::protected_until_ms(now, job.min_runtime_ms, &self.config.contract);
            for &(idx, gpus) in &job.placed_on {
                self.holes.pending(idx, gpus, false);
                self.holes
                    .start(idx, job.serial, gpus, unallocated, protected_until);
            }
        }
        self.levels.used += job.gpus;
        if job.class == JobClass::Unallocated {
            self.levels.unallocated_used += job.gpus;
        }
    }

    fn ordered(&mut self, job_id: &str, cause: PreemptionCause, now: i64) {
        self.out.preemptions += 1;
        self.tally(cause).orders += 1;
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        job.order_cause = cause;
        if !job.pending {
            for &(idx, _) in &job.placed_on {
                self.holes.ordered_off(idx, job.serial);
            }
        }
        let Some(since) = job.running_since else {
            return;
        };
        if !contract::is_protected(since, job.min_runtime_ms, now, &self.config.contract) {
            return;
        }
        // A maintenance window scheduled after a job started may cut its protection (SPEC
        // section 2: a window accepts only work whose protection ends before it); that is the
        // operator's call, not the contract broken. The preemption service orders such work
        // off a grace period before the window starts, not sooner. Any other order inside the
        // protection (a cordon's drain included, or one long before a later window) is a
        // violation.
        let protected_until =
            contract::protected_until_ms(since, job.min_runtime_ms, &self.config.contract);
        let grace = self.config.contract.grace_ms.max(0);
        let window_cut = cause == PreemptionCause::Maintenance
            && job.placed_on.iter().any(|(node, _)| {
                self.windows.get(node).is_some_and(|w| {
                    w.iter().any(|&(scheduled, start, end)| {
                        scheduled > since
                            && start < protected_until
                            && start.saturating_sub(grace) <= now
                            && now < end
                    })
                })
            });
        if !window_cut {
            self.out.violations += 1;
        }
    }

    /// The running count of `cause`'s preemptions.
    fn tally(&mut self, cause: PreemptionCause) -> &mut CausePreemptions {
        self.by_cause.entry(cause).or_insert(CausePreemptions {
            cause,
            orders: 0,
            stopped: 0,
            lost_gpu_ms: 0,
        })
    }

    /// A job stopped by a preemption: placed (not started yet) or running; a report for a job
    /// that holds nothing (a repeat) stops nothing and is not counted.
    fn preempted(&mut self, job_id: &str, now: i64) {
        let Some(job) = self.jobs.get(job_id) else {
            return;
        };
        let (was_placed, cause) = (job.pending, job.order_cause);
        self.release_nodes(job_id);
        let run = self.stop_run(job_id);
        if run.is_none() && !was_placed {
            return;
        }
        let lost = run.map_or(0, |(since, gpus, resumable)| {
            contract::lost_work_gpu_ms(gpus, since, true, resumable, now, &self.config.contract)
        });
        self.out.preempted += 1;
        self.out.lost_gpu_ms += lost;
        let tally = self.tally(cause);
        tally.stopped += 1;
        tally.lost_gpu_ms += lost;
        // A job that cannot resume ends with its stop, as the services end it (no requeue
        // follows): one stopped before it ever started waited until then, not to the end.
        if let Some(job) = self.jobs.get_mut(job_id)
            && !job.resumable
            && !job.ended
        {
            job.ended = true;
            if job.first_start_ms.is_none() {
                job.ended_unstarted_ms = Some(now);
            }
        }
    }

    fn finish(mut self) -> RunMetrics {
        self.advance(self.config.end_ms);
        let end = self.config.end_ms;
        let mut debug = Waits::default();
        let mut allocated = Waits::default();
        let mut unallocated = Waits::default();
        let mut jobs: Vec<&Tracked> = self.jobs.values().collect();
        jobs.sort_by_key(|j| j.submit_ms);
        for job in jobs {
            let waits = match job.class {
                JobClass::Debug => &mut debug,
                JobClass::Allocated => &mut allocated,
                JobClass::Unallocated => &mut unallocated,
            };
            match job.first_start_ms {
                Some(start) => waits.sorted_ms.push(start - job.submit_ms),
                // Cancelled or failed before it ever started: it waited until then (the
                // simulator writes no such event; a production log has them). Not counted
                // as a wait until the end, nor dropped: a user who gave up after hours of
                // starvation waited those hours.
                None if job.ended => {
                    let ended = job.ended_unstarted_ms.unwrap_or(end);
                    waits.sorted_ms.push((ended - job.submit_ms).max(0));
                }
                None => {
                    waits.sorted_ms.push((end - job.submit_ms).max(0));
                    waits.unstarted += 1;
                }
            }
        }
        for w in [&mut debug, &mut allocated, &mut unallocated] {
            w.sorted_ms.sort_unstable();
        }
        let i = self.integrals;
        let mut out = self.out;
        out.debug_waits = debug;
        out.allocated_waits = allocated;
        out.unallocated_waits = unallocated;
        out.used_gpu_ms = i.used;
        out.available_gpu_ms = i.available;
        out.contention_used_gpu_ms = i.contention_used;
        out.contention_available_gpu_ms = i.contention_available;
        out.unallocated_gpu_ms = i.unallocated;
        out.idle_while_waiting_gpu_ms = i.idle_while_waiting;
        out.idle_under_contention = self.holes.split;
        out.hourly = i.hourly;
        out.by_cause = self.by_cause.into_values().collect();
        let mut missed = self.missed;
        missed.close_hours(&self.usage, end);
        out.allocations = allocation_rows(&self.usage, self.tree.as_ref(), end);
        for a in &mut out.allocations {
            (a.owed_over_served_gpu_ms, a.missed_over_served_gpu_ms) = missed
                .over_served_hours
                .get(&a.path)
                .copied()
                .unwrap_or((0, 0));
        }
        out.owed_over_served_gpu_ms = out
            .allocations
            .iter()
            .map(|a| a.owed_over_served_gpu_ms)
            .sum();
        out.missed_over_served_gpu_ms = out
            .allocations
            .iter()
            .map(|a| a.missed_over_served_gpu_ms)
            .sum();
        out.owed_gpu_ms = out.allocations.iter().map(|a| a.owed_gpu_ms).sum();
        out.delivered_owed_gpu_ms = out
            .allocations
            .iter()
            .map(|a| a.delivered_owed_gpu_ms)
            .sum();
        out
    }
}

/// Per-allocation rows from the accounting ledger: every allocation of the final tree (zeros
/// when it had no demand) plus any other allocation that had some.
fn allocation_rows(
    usage: &UsageFold,
    tree: Option<&BudgetTree>,
    end_ms: i64,
) -> Vec<AllocationMetrics> {
    let cluster = usage.cluster_names().next().map(str::to_owned);
    let ledger = cluster.and_then(|c| usage.ledger(&c, end_ms).ok());
    let mut rows: std::collections::BTreeMap<String, AllocationMetrics> = Default::default();
    if let Some(tree) = tree {
        for path in tree.allocation_paths() {
            let fraction_ppm = tree.allocation(path).map_or(0, |id| {
                let f = tree.fraction(id);
                u64::try_from(f.num.saturating_mul(1_000_000) / f.den.max(1)).unwrap_or(0)
            });
            rows.insert(
                path.to_owned(),
                AllocationMetrics {
                    path: path.to_owned(),
                    fraction_ppm,
                    demand_gpu_ms: 0,
                    owed_gpu_ms: 0,
                    delivered_gpu_ms: 0,
                    delivered_owed_gpu_ms: 0,
                    owed_over_served_gpu_ms: 0,
                    missed_over_served_gpu_ms: 0,
                },
            );
        }
    }
    for row in ledger.iter().flat_map(|l| l.allocations.iter()) {
        let entry = rows
            .entry(row.allocation.clone())
            .or_insert_with(|| AllocationMetrics {
                path: row.allocation.clone(),
                fraction_ppm: 0,
                demand_gpu_ms: 0,
                owed_gpu_ms: 0,
                delivered_gpu_ms: 0,
                delivered_owed_gpu_ms: 0,
                owed_over_served_gpu_ms: 0,
                missed_over_served_gpu_ms: 0,
            });
        entry.demand_gpu_ms = row.totals.demand_gpu_ms;
        entry.owed_gpu_ms = row.totals.owed_gpu_ms;
        entry.delivered_gpu_ms = row.totals.delivered_gpu_ms;
        entry.delivered_owed_gpu_ms = row.totals.delivered_owed_gpu_ms;
    }
    rows.into_values().collect()
}

/// Measures policy `policy`'s log `events` (one cluster, in log order).
pub fn measure(policy: &str, events: &[pb::Event], config: &MeasureConfig) -> RunMetrics {
    let mut m = Measure {
        config,
        jobs: HashMap::new(),
        nodes: HashMap::new(),
        levels: Levels::default(),
        integrals: Integrals::default(),
        clock: config.start_ms,
        out: empty(policy, events.len()),
        by_cause: BTreeMap::new(),
        usage: UsageFold::new(config.window),
        missed: MissedOwed::default(),
        holes: Holes::default(),
        windows: HashMap::new(),
        tree: None,
    };
    for (i, event) in events.iter().enumerate() {
        // The span's end is exclusive, as the engines run it.
        if event.at_ms >= config.end_ms {
            break;
        }
        m.advance(event.at_ms);
        m.missed.close_hours(&m.usage, event.at_ms);
        m.apply(event);
        m.levels.closed_used = m.holes.closed_running();
        m.usage.apply(i as u64 + 1, event);
    }
    m.finish()
}

fn empty(policy: &str, events: usize) -> RunMetrics {
    RunMetrics {
        policy: policy.to_owned(),
        allocations: Vec::new(),
        owed_gpu_ms: 0,
        delivered_owed_gpu_ms: 0,
        owed_over_served_gpu_ms: 0,
        missed_over_served_gpu_ms: 0,
        used_gpu_ms: 0,
        available_gpu_ms: 0,
        contention_used_gpu_ms: 0,
        contention_available_gpu_ms: 0,
        unallocated_gpu_ms: 0,
        idle_while_waiting_gpu_ms: 0,
        idle_under_contention: Default::default(),
        debug_waits: Waits::default(),
        allocated_waits: Waits::default(),
        unallocated_waits: Waits::default(),
        preemptions: 0,
        preempted: 0,
        lost_gpu_ms: 0,
        by_cause: Vec::new(),
        violations: 0,
        jobs_submitted: 0,
        jobs_finished: 0,
        events: events as u64,
        hourly: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = HOUR_MS;
    const T0: i64 = 1_000 * HOUR;

    fn at(at_ms: i64, body: Body) -> pb::Event {
        pb::Event {
            at_ms,
            body: Some(body),
        }
    }

    fn node(name: &str) -> pb::Event {
        at(
            T0,
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: "c".into(),
                node: name.into(),
                gpus: 8,
            }),
        )
    }

    /// Job `id` of `nodes` x 8 GPUs and a `min_runtime_s` submitted at `t`.
    fn submitted(t: i64, id: &str, nodes: u32, min_runtime_s: i64) -> pb::Event {
        at(
            t,
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: id.into(),
                idempotency_key: id.into(),
                spec: Some(pb::JobSpec {
                    cluster: "c".into(),
                    allocation: "lab/a".into(),
                    user: "u".into(),
                    gpus: i64::from(nodes * 8),
                    nodes: i64::from(nodes),
                    min_runtime_s,
                    resumable: true,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes,
                    gpus_per_node: 8,
                }),
            }),
        )
    }

    /// `a` (8 GPUs, 2 h minimum runtime) starts on n1 at `T0`.
    fn a_runs_on_n1() -> Vec<pb::Event> {
        vec![
            node("n1"),
            node("n2"),
            submitted(T0, "a", 1, 7_200),
            at(
                T0,
                Body::JobPlaced(pb::JobPlaced {
                    job_id: "a".into(),
                    nodes: vec![pb::NodeGpus {
                        node: "n1".into(),
                        gpus: 8,
                    }],
                    basis: None,
                }),
            ),
            at(T0, Body::JobStarted(pb::JobStarted { job_id: "a".into() })),
        ]
    }

    fn config(end_ms: i64) -> MeasureConfig {
        MeasureConfig {
            start_ms: T0,
            end_ms,
            contract: ContractConfig::default(),
            window: FoldConfig::default(),
        }
    }

    /// A job that cannot resume, ordered off while placed and not started yet: its stop ends
    /// it (the services end it), so it waited until then; a repeated stop report counts once.
    #[test]
    fn a_job_that_cannot_resume_stopped_before_it_started_waited_until_then() {
        let mut log = a_runs_on_n1();
        let mut b = submitted(T0 + HOUR / 6, "b", 1, 600);
        if let Some(Body::JobSubmitted(s)) = &mut b.body {
            s.spec.as_mut().unwrap().resumable = false;
        }
        log.push(b);
        log.push(at(
            T0 + HOUR / 4,
            Body::JobPlaced(pb::JobPlaced {
                job_id: "b".into(),
                nodes: vec![pb::NodeGpus {
                    node: "n2".into(),
                    gpus: 8,
                }],
                basis: None,
            }),
        ));
        for _ in 0..2 {
            log.push(at(
                T0 + HOUR / 3,
                Body::JobPreempted(pb::JobPreempted {
                    job_id: "b".into(),
                    killed: false,
                }),
            ));
        }
        let m = measure("p", &log, &config(T0 + 2 * HOUR));
        assert_eq!(m.allocated_waits.sorted_ms, vec![0, HOUR / 6]);
        assert_eq!(m.allocated_waits.unstarted, 0);
        assert_eq!(m.preempted, 1, "the repeat stops nothing");
        assert_eq!(m.lost_gpu_ms, 0, "it never ran");
    }

    #[test]
    fn a_job_cancelled_before_it_started_waited_until_then() {
        let mut log = a_runs_on_n1();
        log.push(submitted(T0 + HOUR / 6, "b", 1, 600));
        log.push(at(
            T0 + HOUR / 3,
            Body::JobCancelled(pb::JobCancelled {
                job_id: "b".into(),
                ..Default::default()
            }),
        ));
        let m = measure("p", &log, &config(T0 + 2 * HOUR));
        // `a` waited 0; `b` 10 min, until it was cancelled (not until the end: 1 h 50 min).
        assert_eq!(m.allocated_waits.sorted_ms, vec![0, HOUR / 6]);
        assert_eq!(m.allocated_waits.unstarted, 0);
    }

    #[test]
    fn work_running_on_a_cordoned_node_counts_as_available_too() {
        let mut log = a_runs_on_n1();
        // n1 is cordoned with `a` still on it, and a 2 x 8 job waits for the second hour.
        log.push(at(
            T0 + HOUR,
            Body::NodeCordoned(pb::NodeCordoned {
                cluster: "c".into(),
                node: "n1".into(),
                reason: "repair".into(),
            }),
        ));
        log.push(submitted(T0 + HOUR, "b", 2, 600));
        let m = measure("p", &log, &config(T0 + 2 * HOUR));
        // Under contention (the second hour): `a`'s 8 GPUs used, of n2's 8 open ones plus the
        // 8 `a` still runs on. Counting only open nodes as available read 8 / 8 = 100%.
        assert_eq!(m.contention_used_gpu_ms, 8 * HOUR as u128);
        assert_eq!(m.contention_available_gpu_ms, 16 * HOUR as u128);
        assert_eq!(m.available_gpu_ms, 32 * HOUR as u128);
        assert_eq!(m.hourly[1].capacity_gpu_ms, 16 * HOUR as u128);
        // Once `a` stops, n1's GPUs are no longer available.
        log.push(at(
            T0 + 2 * HOUR,
            Body::JobFinished(pb::JobFinished {
                job_id: "a".into(),
                exit_code: 0,
            }),
        ));
        let m = measure("p", &log, &config(T0 + 3 * HOUR));
        assert_eq!(m.available_gpu_ms, (16 + 16 + 8) * HOUR as u128);
        assert_eq!(m.contention_available_gpu_ms, (16 + 8) * HOUR as u128);
    }

    #[test]
    fn only_a_window_scheduled_after_the_start_may_cut_a_protection() {
        // `a` started at T0 with 2 h of protection; a window on n1 at T0 + 90 min.
        let window = |scheduled: i64| {
            at(
                scheduled,
                Body::MaintenanceScheduled(pb::MaintenanceScheduled {
                    cluster: "c".into(),
                    nodes: vec!["n1".into()],
                    start_ms: T0 + 90 * 60_000,
                    end_ms: T0 + 3 * HOUR,
                    reason: "firmware".into(),
                }),
            )
        };
        // Ordered off a grace period (30 s) before the window, as the preemption service does.
        let drain_at = T0 + 90 * 60_000 - 30_000;
        let order_at = |cause: PreemptionCause, scheduled: Option<i64>, at_ms: i64| {
            let mut log = a_runs_on_n1();
            log.extend(scheduled.map(window));
            log.push(at(
                at_ms,
                Body::PreemptionOrdered(pb::PreemptionOrdered {
                    job_id: "a".into(),
                    grace_deadline_ms: at_ms + 30_000,
                    cause: cause as i32,
                    ..Default::default()
                }),
            ));
            measure("p", &log, &config(T0 + 2 * HOUR)).violations
        };
        let order = |cause, scheduled| order_at(cause, scheduled, drain_at);
        // Scheduled while `a` ran: the window's cut.
        assert_eq!(
            order(PreemptionCause::Maintenance, Some(T0 + 10 * 60_000)),
            0
        );
        // But not an order half an hour before it (a cordon's drain, say, inside the
        // protection, behind a window that comes later).
        assert_eq!(
            order_at(
                PreemptionCause::Maintenance,
                Some(T0 + 10 * 60_000),
                T0 + HOUR
            ),
            1
        );
        // A maintenance-cause order with no window since the start (a cordon's drain inside
        // the protection), or other causes, break the contract.
        assert_eq!(order(PreemptionCause::Maintenance, None), 1);
        assert_eq!(order(PreemptionCause::Window, Some(T0 + 10 * 60_000)), 1);
        assert_eq!(order(PreemptionCause::ShareFloor, None), 1);
    }

    #[test]
    fn a_node_removed_and_registered_again_is_open() {
        let mut log = vec![node("n1")];
        let cordon = Body::NodeCordoned(pb::NodeCordoned {
            cluster: "c".into(),
            node: "n1".into(),
            reason: "repair".into(),
        });
        log.push(at(T0, cordon));
        log.push(at(
            T0,
            Body::NodeRemoved(pb::NodeRemoved {
                cluster: "c".into(),
                node: "n1".into(),
            }),
        ));
        log.extend(
            a_runs_on_n1()
                .into_iter()
                .filter(|e| !matches!(&e.body, Some(Body::NodeRegistered(n)) if n.node == "n2")),
        );
        // n1 is back, open, and `a` runs there: 8 GPUs available, all used.
        let m = measure("p", &log, &config(T0 + HOUR));
        assert_eq!(m.available_gpu_ms, 8 * HOUR as u128);
        assert_eq!(m.used_gpu_ms, 8 * HOUR as u128);
    }

    #[test]
    fn an_event_at_the_end_of_the_span_is_outside_it() {
        let mut log = a_runs_on_n1();
        log.push(at(
            T0 + HOUR,
            Body::JobFinished(pb::JobFinished {
                job_id: "a".into(),
                exit_code: 0,
            }),
        ));
        assert_eq!(measure("p", &log, &config(T0 + HOUR)).jobs_finished, 0);
        assert_eq!(measure("p", &log, &config(T0 + HOUR + 1)).jobs_finished, 1);
    }
}
