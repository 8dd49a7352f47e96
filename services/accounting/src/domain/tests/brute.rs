//! A brute-force model of the fold, written from the definitions and nothing else: it replays
//! the whole event list, keeps every interval forever, and recomputes every figure from scratch
//! by summing overlaps (and, for the ledger, hour by hour). No curves, no eviction, no
//! cumulative sums: if the fold's clever structures are wrong, the two disagree.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fairshare_events::pb::{self, event::Body};
use fairshare_model::budget::BudgetTree;

use crate::domain::ledger::{HOUR_MS, LedgerTotals};
use crate::domain::report::{AccountUsage, LedgerRow};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Queued,
    Placed,
    Running,
    Preempted,
    /// Past its order's grace deadline, its stop not reported yet: counted as killed then.
    Overdue,
    Ended,
}

#[derive(Clone, Debug)]
struct BJob {
    cluster: String,
    allocation: String,
    gpus: u64,
    allocated: bool,
    resumable: bool,
    st: St,
    /// Index of the open run interval / demand interval.
    run: Option<usize>,
    demand: Option<usize>,
    /// The earliest grace deadline of the orders that stop its current run.
    deadline: Option<i64>,
}

/// A span of GPUs held: `end == None` means still open.
#[derive(Clone, Debug)]
pub struct Span {
    pub cluster: String,
    pub allocation: String,
    pub allocated: bool,
    pub gpus: u64,
    pub start: i64,
    pub end: Option<i64>,
}

#[derive(Default, Clone)]
pub struct Brute {
    pub window: i64,
    last: u64,
    jobs: HashMap<String, BJob>,
    clocks: BTreeMap<String, i64>,
    nodes: BTreeMap<String, BTreeMap<String, u32>>,
    /// (time, capacity after the change), per cluster.
    caps: BTreeMap<String, Vec<(i64, u64)>>,
    trees: BTreeMap<String, Vec<(i64, BudgetTree)>>,
    runs: Vec<Span>,
    demands: Vec<Span>,
    first: BTreeMap<String, i64>,
    pub ignored: u64,
}

fn overlap(s: i64, e: i64, from: i64, to: i64) -> u128 {
    let a = s.max(from);
    let b = e.min(to);
    if b > a { (b - a) as u128 } else { 0 }
}

impl Brute {
    pub fn new(window: i64) -> Brute {
        Brute {
            window,
            ..Brute::default()
        }
    }

    fn tick(&mut self, cluster: &str, at: i64) -> i64 {
        let t = match self.clocks.get(cluster) {
            Some(&c) => c.max(at),
            None => at,
        };
        self.clocks.insert(cluster.to_owned(), t);
        self.first.entry(cluster.to_owned()).or_insert(t);
        t
    }

    pub fn clock(&self, cluster: &str) -> Option<i64> {
        self.clocks.get(cluster).copied()
    }

    pub fn clusters(&self) -> Vec<String> {
        self.clocks.keys().cloned().collect()
    }

    pub fn apply(&mut self, seq: u64, e: &pb::Event) {
        if seq <= self.last {
            return;
        }
        self.last = seq;
        let at = e.at_ms;
        let Some(body) = &e.body else { return };
        match body {
            Body::JobSubmitted(s) => {
                let Some(spec) = &s.spec else {
                    self.ignored += 1;
                    return;
                };
                let gpus = match &s.shape {
                    Some(sh) => u64::from(sh.nodes) * u64::from(sh.gpus_per_node),
                    None if spec.gpus > 0 => spec.gpus as u64,
                    None => {
                        self.ignored += 1;
                        return;
                    }
                };
                let stale = self
                    .clocks
                    .get(&spec.cluster)
                    .is_some_and(|&c| at <= c - self.window);
                if spec.min_runtime_s < 0 || stale || self.jobs.contains_key(&s.job_id) {
                    self.ignored += 1;
                    return;
                }
                self.pass(&spec.cluster, at);
                let t = self.tick(&spec.cluster, at);
                let mut job = BJob {
                    cluster: spec.cluster.clone(),
                    allocation: spec.allocation.clone(),
                    gpus,
                    allocated: spec.min_runtime_s > 0,
                    resumable: spec.resumable,
                    st: St::Queued,
                    run: None,
                    demand: None,
                    deadline: None,
                };
                job.demand = Some(self.open(&job, t, false));
                self.jobs.insert(s.job_id.clone(), job);
            }
            Body::JobPlaced(x) => self.transition(&x.job_id, at, "place"),
            Body::JobStarted(x) => self.transition(&x.job_id, at, "start"),
            Body::JobFinished(x) => self.transition(&x.job_id, at, "end"),
            Body::JobFailed(x) => self.transition(&x.job_id, at, "end"),
            Body::JobCancelled(x) => self.transition(&x.job_id, at, "end"),
            Body::JobPreempted(x) => self.transition(&x.job_id, at, "preempt"),
            Body::JobRequeued(x) => self.transition(&x.job_id, at, "requeue"),
            Body::PreemptionOrdered(o) => {
                if let Some(job) = self.jobs.get_mut(&o.job_id)
                    && matches!(job.st, St::Placed | St::Running)
                {
                    let d = o.grace_deadline_ms;
                    job.deadline = Some(job.deadline.map_or(d, |e| e.min(d)));
                }
            }
            Body::BudgetTreeSet(b) => match BudgetTree::from_accounts(&b.accounts) {
                Ok(tree) => {
                    self.pass(&b.cluster, at);
                    let t = self.tick(&b.cluster, at);
                    let list = self.trees.entry(b.cluster.clone()).or_default();
                    if list.last().is_some_and(|(lt, _)| *lt == t) {
                        list.pop();
                    }
                    list.push((t, tree));
                }
                Err(_) => self.ignored += 1,
            },
            Body::NodeRegistered(n) => {
                self.pass(&n.cluster, at);
                let t = self.tick(&n.cluster, at);
                self.nodes
                    .entry(n.cluster.clone())
                    .or_default()
                    .insert(n.node.clone(), n.gpus);
                self.record_cap(&n.cluster, t);
            }
            Body::NodeRemoved(n) => {
                let known = self
                    .nodes
                    .get(&n.cluster)
                    .is_some_and(|m| m.contains_key(&n.node));
                if !known {
                    self.ignored += 1;
                    return;
                }
                self.pass(&n.cluster, at);
                let t = self.tick(&n.cluster, at);
                if let Some(m) = self.nodes.get_mut(&n.cluster) {
                    m.remove(&n.node);
                }
                self.record_cap(&n.cluster, t);
            }
            _ => {}
        }
    }

    fn record_cap(&mut self, cluster: &str, t: i64) {
        let cap: u64 = self.nodes[cluster].values().map(|&g| u64::from(g)).sum();
        self.caps
            .entry(cluster.to_owned())
            .or_default()
            .push((t, cap));
    }

    fn open(&mut self, job: &BJob, t: i64, run: bool) -> usize {
        let span = Span {
            cluster: job.cluster.clone(),
            allocation: job.allocation.clone(),
            allocated: job.allocated,
            gpus: job.gpus,
            start: t,
            end: None,
        };
        let list = if run {
            &mut self.runs
        } else {
            &mut self.demands
        };
        list.push(span);
        list.len() - 1
    }

    /// Every job of `cluster` whose order's deadline is at or before `at` counts as killed
    /// then, in deadline order: its spans end at the deadline (or the clock, if later).
    fn pass(&mut self, cluster: &str, at: i64) {
        let mut due: Vec<(i64, String)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.cluster == cluster && matches!(j.st, St::Placed | St::Running))
            .filter_map(|(id, j)| j.deadline.filter(|d| *d <= at).map(|d| (d, id.clone())))
            .collect();
        due.sort();
        for (d, id) in due {
            let t = self.tick(cluster, d);
            let Some(mut job) = self.jobs.get(&id).cloned() else {
                continue;
            };
            if let Some(i) = job.run.take() {
                self.runs[i].end = Some(t);
            }
            if let Some(i) = job.demand.take() {
                self.demands[i].end = Some(t);
            }
            job.st = St::Overdue;
            self.jobs.insert(id, job);
        }
    }

    /// This model as queries at `now` see it: with the deadlines before `now` passed.
    pub fn at(&self, cluster: &str, now: i64) -> Brute {
        let mut copy = self.clone();
        copy.pass(cluster, now - 1);
        copy
    }

    fn transition(&mut self, id: &str, at: i64, what: &str) {
        if let Some(job) = self.jobs.get(id)
            && job.st != St::Ended
        {
            let cluster = job.cluster.clone();
            self.pass(&cluster, at);
        }
        let Some(job) = self.jobs.get(id).cloned() else {
            self.ignored += 1;
            return;
        };
        let next = match (what, job.st) {
            ("place", St::Queued) => St::Placed,
            ("start", St::Placed) => St::Running,
            ("preempt", St::Running | St::Placed | St::Overdue) if job.resumable => St::Preempted,
            ("preempt", St::Running | St::Placed | St::Overdue) => St::Ended,
            ("requeue", St::Preempted) => St::Queued,
            ("end", St::Queued | St::Placed | St::Running | St::Preempted | St::Overdue) => {
                St::Ended
            }
            _ => {
                self.ignored += 1;
                return;
            }
        };
        let t = self.tick(&job.cluster, at);
        let mut job = job;
        if matches!(next, St::Preempted | St::Ended | St::Queued) {
            job.deadline = None;
        }
        match next {
            // Still waiting: the demand interval stays open.
            St::Placed | St::Overdue => {}
            St::Running => job.run = Some(self.open(&job, t, true)),
            St::Queued => job.demand = Some(self.open(&job, t, false)),
            // An overdue job's spans ended at its deadline: nothing is left to take.
            St::Preempted | St::Ended => {
                if let Some(i) = job.run.take() {
                    self.runs[i].end = Some(t);
                }
                if let Some(i) = job.demand.take() {
                    self.demands[i].end = Some(t);
                }
            }
        }
        job.st = next;
        self.jobs.insert(id.to_owned(), job);
    }

    // ----- recomputation -----

    fn capacity_between(&self, cluster: &str, from: i64, to: i64) -> u128 {
        let Some(steps) = self.caps.get(cluster) else {
            return 0;
        };
        let mut total = 0u128;
        for (i, &(t, cap)) in steps.iter().enumerate() {
            let next = steps.get(i + 1).map_or(i64::MAX, |s| s.0);
            total += u128::from(cap) * overlap(t, next, from, to);
        }
        total
    }

    /// Floor of fraction x capacity, per tree in force, summed.
    pub fn allocated(&self, cluster: &str, path: &str, from: i64, to: i64) -> u128 {
        let Some(trees) = self.trees.get(cluster) else {
            return 0;
        };
        let mut total = 0u128;
        for (i, (t, tree)) in trees.iter().enumerate() {
            let next = trees.get(i + 1).map_or(i64::MAX, |s| s.0);
            let (s, e) = ((*t).max(from), next.min(to));
            if e <= s {
                continue;
            }
            let Some(index) = tree.accounts.iter().position(|a| a.path == path) else {
                continue;
            };
            let f = tree.fraction(index);
            let cap = self.capacity_between(cluster, s, e);
            total += (f.num * cap) / f.den;
        }
        total
    }

    fn spans_between(
        spans: &[Span],
        from: i64,
        to: i64,
        now: i64,
        keep: impl Fn(&Span) -> bool,
    ) -> u128 {
        spans
            .iter()
            .filter(|s| keep(s))
            .map(|s| u128::from(s.gpus) * overlap(s.start, s.end.unwrap_or(now), from, to))
            .sum()
    }

    pub fn charged(&self, cluster: &str, path: &str, now: i64, subtree: bool) -> u128 {
        let prefix = format!("{path}/");
        Self::spans_between(&self.runs, now - self.window, now, now, |s| {
            s.cluster == cluster
                && s.allocated
                && (s.allocation == path || (subtree && s.allocation.starts_with(&prefix)))
        })
    }

    /// GPUs of allocated jobs of `path` (with `subtree`, also below it) running at `now`:
    /// started by then and not stopped by then.
    pub fn running(&self, cluster: &str, path: &str, now: i64, subtree: bool) -> u64 {
        self.open_at(&self.runs, cluster, path, now, subtree)
    }

    /// GPUs of the allocated `spans` of `path` (and below it, with `subtree`) open at `now`.
    fn open_at(&self, spans: &[Span], cluster: &str, path: &str, now: i64, subtree: bool) -> u64 {
        let prefix = format!("{path}/");
        spans
            .iter()
            .filter(|s| {
                s.cluster == cluster
                    && s.allocated
                    && (s.allocation == path || (subtree && s.allocation.starts_with(&prefix)))
                    && s.start <= now
                    && s.end.is_none_or(|e| e > now)
            })
            .map(|s| s.gpus)
            .sum()
    }

    pub fn unallocated(&self, cluster: &str, now: i64) -> u128 {
        Self::spans_between(&self.runs, now - self.window, now, now, |s| {
            s.cluster == cluster && !s.allocated
        })
    }

    pub fn capacity(&self, cluster: &str, now: i64) -> u128 {
        self.capacity_between(cluster, now - self.window, now)
    }

    /// The rows a window report lists: leaves / inner accounts of every tree in force inside
    /// the window, every charged path, and every ancestor of a charged path.
    pub fn listed(&self, cluster: &str, now: i64) -> (BTreeSet<String>, BTreeSet<String>) {
        let from = now - self.window;
        let mut leaves = BTreeSet::new();
        let mut inner = BTreeSet::new();
        if let Some(trees) = self.trees.get(cluster) {
            for (i, (t, tree)) in trees.iter().enumerate() {
                let next = trees.get(i + 1).map_or(i64::MAX, |s| s.0);
                if *t <= now && next > from {
                    for a in &tree.accounts {
                        if a.is_allocation() {
                            leaves.insert(a.path.clone());
                        } else {
                            inner.insert(a.path.clone());
                        }
                    }
                }
            }
        }
        for s in self
            .runs
            .iter()
            .filter(|s| s.cluster == cluster && s.allocated)
        {
            if self.charged(cluster, &s.allocation, now, false) > 0 {
                leaves.insert(s.allocation.clone());
                for (cut, _) in s.allocation.match_indices('/') {
                    inner.insert(s.allocation[..cut].to_owned());
                }
            }
        }
        (leaves, inner)
    }

    pub fn window_rows(&self, cluster: &str, now: i64) -> (Vec<AccountUsage>, Vec<AccountUsage>) {
        let (leaves, inner) = self.listed(cluster, now);
        let from = now - self.window;
        let row = |p: &String, subtree: bool| AccountUsage {
            path: p.clone(),
            charged_gpu_ms: self.charged(cluster, p, now, subtree) as u64,
            allocated_gpu_ms: self.allocated(cluster, p, from, now) as u64,
            running_gpus: self.running(cluster, p, now, subtree),
            queued_gpus: self.open_at(&self.demands, cluster, p, now, subtree)
                - self.running(cluster, p, now, subtree),
        };
        (
            leaves.iter().map(|p| row(p, false)).collect(),
            inner.iter().map(|p| row(p, true)).collect(),
        )
    }

    /// The ledger, hour by hour, from the cluster's first event to the last hour ended by `now`.
    pub fn ledger(&self, cluster: &str, now: i64) -> (Vec<LedgerRow>, u128) {
        let mut rows: BTreeMap<String, LedgerTotals> = BTreeMap::new();
        let mut unallocated = 0u128;
        let Some(&first) = self.first.get(cluster) else {
            return (Vec::new(), 0);
        };
        let paths: BTreeSet<String> = self
            .demands
            .iter()
            .filter(|s| s.cluster == cluster && s.allocated)
            .map(|s| s.allocation.clone())
            .collect();
        let (h0, h1) = (first.div_euclid(HOUR_MS), now.div_euclid(HOUR_MS));
        for h in h0..h1 {
            let (hs, he) = (h * HOUR_MS, (h + 1) * HOUR_MS);
            unallocated += Self::spans_between(&self.runs, hs, he, now, |s| {
                s.cluster == cluster && !s.allocated
            });
            for p in &paths {
                let mine = |s: &Span| s.cluster == cluster && s.allocated && &s.allocation == p;
                let demand = Self::spans_between(&self.demands, hs, he, now, mine);
                let run = Self::spans_between(&self.runs, hs, he, now, mine);
                let owed = self.allocated(cluster, p, hs, he).min(demand);
                let t = rows.entry(p.clone()).or_default();
                t.demand_gpu_ms += demand;
                t.owed_gpu_ms += owed;
                t.delivered_gpu_ms += run;
                t.delivered_owed_gpu_ms += run.min(owed);
            }
        }
        let rows = rows
            .into_iter()
            .filter(|(_, t)| !t.is_zero())
            .map(|(allocation, totals)| LedgerRow { allocation, totals })
            .collect();
        (rows, unallocated)
    }
}
