//! The decision service end to end against a real nats-server: a 128 x 8 GPU cluster, a budget
//! tree of four allocations in two levels, 1,000 jobs (1 to 16 GPUs, minimum runtimes 15 min to
//! 8 h, a few unallocated), the submission service, the decision service and the demo launcher
//! in-process. Midway the decision service is stopped and a fresh instance (rebuilt from the
//! log) takes over.
//!
//! Everything is checked from the log afterwards:
//! - every job is placed exactly once (a second placement would need a requeue) and finishes;
//! - no node ever holds more GPUs than it has (placements and ends replayed in log order);
//! - within an allocation, jobs start in queue order (priority, submit time, id) wherever the
//!   order is decidable: a job that ranks earlier, was queued when a later one was placed, and
//!   is no harder to fit (same shape, minimum runtime no longer) is placed no later;
//! - no GPU idles while placeable work waits: after each cycle's placements, no queued job fits
//!   the free GPUs (GPUs reserved by the cycle's reservation count as free only for work the
//!   reservation lets backfill);
//! - every cycle re-derives from the log byte for byte ([`audit`]), and cycle numbers grow
//!   across the restart.
//!
//! The timer cycle is set to a minute so only event-driven cycles run: a lost trigger would
//! stall the run and fail the bounded wait instead of being papered over by the timer.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fairshare_decision::domain::{DecisionState, decide};
use fairshare_decision::shell::audit::{LoggedPlacement, replay_cycles};
use fairshare_decision::shell::{self as decision, Explainer, audit, read_log};
use fairshare_e2e::{
    BIG, BIG_ALLOCATIONS as ALLOCATIONS, BIG_BUDGET as BUDGET, BIG_INVENTORY as INVENTORY, Stack,
    accepted,
};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_launcher::runner::{self, RunnerConfig};
use fairshare_model::files;
use fairshare_runtime::admin;
use fairshare_runtime::clock::{Clock, SystemClock};
use fairshare_runtime::log::{Follower, LogEntry};
use fairshare_testkit::Rng;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const NODES: u32 = 128;
const GPUS_PER_NODE: u32 = 8;
const JOBS: usize = 1_000;

fn workload() -> Vec<pb::SubmitRequest> {
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    (0..JOBS)
        .map(|i| {
            let allocation = ALLOCATIONS[rng.below(4) as usize];
            let gpus = match rng.below(100) {
                0..30 => 1,
                30..50 => 2,
                50..70 => 4,
                70..92 => 8,
                _ => 16,
            };
            let min_runtime_s = match rng.below(100) {
                0..4 => 0, // unallocated
                4..40 => 900,
                40..65 => 3_600,
                65..85 => 4 * 3_600,
                _ => 8 * 3_600,
            };
            pb::SubmitRequest {
                idempotency_key: format!("decision-e2e-{i}"),
                spec: Some(pb::JobSpec {
                    cluster: BIG.into(),
                    allocation: allocation.into(),
                    user: "ada".into(),
                    gpus,
                    nodes: 0,
                    min_runtime_s,
                    resumable: true,
                    priority: rng.below(3) as i32,
                    time_limit_s: 0,
                    // 60-600 s of job time: 0.1-1 s at the launcher's time scale.
                    payload: format!("sleep {}", 60 + rng.below(541)).into(),
                    name: format!("job-{i}"),
                }),
            }
        })
        .collect()
}

/// A task with a graceful stop.
struct Running<T> {
    stop: oneshot::Sender<()>,
    task: JoinHandle<T>,
}

impl<T> Running<T> {
    async fn stop(self) -> T {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("stops within 10 s")
            .expect("task did not panic")
    }
}

async fn start_decision(stack: &Stack, debounce: Duration) -> (Running<()>, Explainer) {
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let config = decision::Config {
        debounce,
        cycle_every: Duration::from_secs(60),
        ..decision::Config::new(BIG)
    };
    let service = decision::Service::start(client, config, Arc::new(SystemClock))
        .await
        .unwrap();
    let explainer = service.explainer();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        service
            .serve(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (Running { stop, task }, explainer)
}

async fn start_launcher(stack: &Stack) -> Running<()> {
    let client = async_nats::connect(stack.server.url()).await.unwrap();
    let config = RunnerConfig {
        cluster: BIG.into(),
        time_scale: 600,
        default_duration: Duration::from_secs(60),
        honour_preemption: true,
        tick: Duration::from_millis(10),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        runner::run(client, config, Arc::new(SystemClock), async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Running { stop, task }
}

/// Records, after each cycle, the most jobs seen waiting and the reason codes seen; checks
/// every waiting job has a reason and the summary agrees with the per-job list.
fn watch_reasons(mut explainer: Explainer) -> JoinHandle<(usize, BTreeSet<&'static str>)> {
    tokio::spawn(async move {
        let mut most = 0;
        let mut codes = BTreeSet::new();
        let mut next = 1;
        while let Some(seen) = explainer.wait_for_cycle(next).await {
            let (summary, waiting) = explainer.snapshot();
            next = seen.cycle.max(summary.cycle) + 1;
            assert_eq!(waiting.len(), summary.waiting);
            most = most.max(waiting.len());
            for (id, w) in &waiting {
                assert!(!w.reason.is_empty(), "job {id} waits without a reason");
                assert!(ALLOCATIONS.contains(&&*w.allocation));
                codes.insert(w.code);
            }
        }
        (most, codes)
    })
}

/// What the test knows about one job from the log.
#[derive(Debug, Default)]
struct JobFacts {
    allocation: String,
    priority: i32,
    submitted_ms: i64,
    submitted_seq: u64,
    shape: (u32, u32),
    min_runtime_s: i64,
    placements: Vec<(u64, u64)>, // (sequence, cycle)
    started: usize,
    finished: usize,
}

fn facts(entries: &[LogEntry]) -> BTreeMap<String, JobFacts> {
    let mut jobs: BTreeMap<String, JobFacts> = BTreeMap::new();
    let mut since_requeue: HashMap<String, usize> = HashMap::new();
    for e in entries {
        let event = e.event.as_ref().expect("every entry decodes");
        match event.body.as_ref().unwrap() {
            Body::JobSubmitted(s) => {
                let spec = s.spec.as_ref().unwrap();
                let shape = s.shape.unwrap();
                jobs.insert(
                    s.job_id.clone(),
                    JobFacts {
                        allocation: spec.allocation.clone(),
                        priority: spec.priority,
                        submitted_ms: event.at_ms,
                        submitted_seq: e.sequence,
                        shape: (shape.nodes, shape.gpus_per_node),
                        min_runtime_s: spec.min_runtime_s,
                        ..JobFacts::default()
                    },
                );
            }
            Body::JobPlaced(p) => {
                let n = since_requeue.entry(p.job_id.clone()).or_default();
                *n += 1;
                assert_eq!(
                    *n, 1,
                    "job {} placed again at sequence {} without a requeue",
                    p.job_id, e.sequence
                );
                let job = jobs.get_mut(&p.job_id).expect("placed job was submitted");
                let total: u32 = p.nodes.iter().map(|n| n.gpus).sum();
                assert_eq!(
                    total,
                    job.shape.0 * job.shape.1,
                    "placement of {}",
                    p.job_id
                );
                if job.shape.0 > 1 {
                    assert_eq!(p.nodes.len() as u32, job.shape.0);
                    assert!(
                        p.nodes.iter().all(|n| n.gpus == GPUS_PER_NODE),
                        "whole nodes"
                    );
                }
                job.placements
                    .push((e.sequence, p.basis.as_ref().unwrap().cycle));
            }
            Body::JobRequeued(r) => {
                since_requeue.remove(&r.job_id);
            }
            Body::JobStarted(s) => jobs.get_mut(&s.job_id).unwrap().started += 1,
            Body::JobFinished(f) => jobs.get_mut(&f.job_id).unwrap().finished += 1,
            _ => {}
        }
    }
    jobs
}

/// Replays placements and ends in log order; panics if a node is ever over-committed.
fn assert_never_overcommitted(entries: &[LogEntry]) -> u32 {
    let mut held: HashMap<String, Vec<(String, u32)>> = HashMap::new();
    let mut used: HashMap<String, u32> = HashMap::new();
    let mut peak_total = 0;
    let mut total = 0;
    for e in entries {
        let event = e.event.as_ref().unwrap();
        match event.body.as_ref().unwrap() {
            Body::JobPlaced(p) => {
                for n in &p.nodes {
                    let u = used.entry(n.node.clone()).or_default();
                    *u += n.gpus;
                    assert!(
                        *u <= GPUS_PER_NODE,
                        "node {} over-committed ({} GPUs) at sequence {}",
                        n.node,
                        u,
                        e.sequence
                    );
                    total += n.gpus;
                }
                peak_total = peak_total.max(total);
                held.insert(
                    p.job_id.clone(),
                    p.nodes.iter().map(|n| (n.node.clone(), n.gpus)).collect(),
                );
            }
            Body::JobFinished(pb::JobFinished { job_id, .. })
            | Body::JobFailed(pb::JobFailed { job_id, .. })
            | Body::JobCancelled(pb::JobCancelled { job_id, .. })
            | Body::JobPreempted(pb::JobPreempted { job_id, .. }) => {
                for (node, gpus) in held.remove(job_id).unwrap_or_default() {
                    *used.get_mut(&node).unwrap() -= gpus;
                    total -= gpus;
                }
            }
            _ => {}
        }
    }
    assert!(held.is_empty(), "jobs still hold GPUs: {:?}", held.keys());
    peak_total
}

/// Within each allocation: a job that ranks earlier (priority, submit time, id), was queued
/// when a later-ranked one was placed, and is no harder to fit (same shape, minimum runtime
/// no longer, same allocated/unallocated pass) must be placed in the same cycle or earlier.
fn assert_rank_order(jobs: &BTreeMap<String, JobFacts>, entries: &[LogEntry]) -> usize {
    let through_of: HashMap<u64, u64> = entries
        .iter()
        .filter_map(|e| match e.event.as_ref().ok()?.body.as_ref()? {
            Body::JobPlaced(p) => Some((e.sequence, p.basis.as_ref()?.through_sequence)),
            _ => None,
        })
        .collect();
    let mut by_allocation: BTreeMap<&str, Vec<(&String, &JobFacts)>> = BTreeMap::new();
    for (id, job) in jobs {
        by_allocation
            .entry(&job.allocation)
            .or_default()
            .push((id, job));
    }
    let mut pairs = 0;
    for list in by_allocation.values_mut() {
        list.sort_by_key(|(id, j)| (std::cmp::Reverse(j.priority), j.submitted_ms, (*id).clone()));
        for (i, (a_id, a)) in list.iter().enumerate() {
            for (b_id, b) in &list[i + 1..] {
                let comparable = a.shape == b.shape
                    && (a.min_runtime_s == 0) == (b.min_runtime_s == 0)
                    && a.min_runtime_s <= b.min_runtime_s;
                let (b_seq, b_cycle) = b.placements[0];
                if !comparable || a.submitted_seq > through_of[&b_seq] {
                    continue;
                }
                pairs += 1;
                let (_, a_cycle) = a.placements[0];
                assert!(
                    a_cycle <= b_cycle,
                    "{a_id} ranks before {b_id} in {} and was queued, but was placed in cycle {a_cycle} after cycle {b_cycle}",
                    a.allocation
                );
            }
        }
    }
    pairs
}

/// After each cycle's placements, no queued job fits the free GPUs it may use.
fn assert_no_idle_while_work_fits(entries: &[LogEntry]) -> usize {
    let mut cycles = 0;
    let bad = replay_cycles(
        BIG,
        entries,
        |key, state: &DecisionState, logged: &[LoggedPlacement]| {
            cycles += 1;
            let decision = decide(state, key.computed_at_ms);
            let reserved: BTreeSet<&str> = decision
                .reservation
                .iter()
                .flat_map(|r| r.nodes.iter().map(|n| n.node))
                .collect();
            let reservation_start = decision.reservation.as_ref().map(|r| r.start_ms);
            let mut placed_here: HashMap<&str, u32> = HashMap::new();
            let mut placed_jobs = BTreeSet::new();
            for l in logged {
                let Some(Body::JobPlaced(p)) = &l.event.body else {
                    unreachable!()
                };
                placed_jobs.insert(p.job_id.as_str());
                for n in &p.nodes {
                    *placed_here.entry(n.node.as_str()).or_default() += n.gpus;
                }
            }
            // (max free on one node, wholly free nodes) over all nodes and over unreserved ones.
            let mut all = (0u32, 0u32);
            let mut unreserved = (0u32, 0u32);
            for (name, node) in state.inventory().nodes() {
                assert!(!node.cordoned);
                let used = state.load(name).map_or(0, |l| l.used)
                    + placed_here.get(name.as_str()).copied().unwrap_or(0);
                let free = node.gpus.saturating_sub(used);
                let whole = u32::from(free == node.gpus);
                all = (all.0.max(free), all.1 + whole);
                if !reserved.contains(name.as_str()) {
                    unreserved = (unreserved.0.max(free), unreserved.1 + whole);
                }
            }
            for q in state.queues().values() {
                for (k, req) in q.allocated.iter().chain(q.unallocated.iter()) {
                    if placed_jobs.contains(&*k.job_id) {
                        continue;
                    }
                    let may_backfill = req.is_unallocated()
                        || reservation_start
                            .is_none_or(|s| key.computed_at_ms + req.min_runtime_ms <= s);
                    let (max_free, whole) = if may_backfill { all } else { unreserved };
                    let fits = if req.shape.nodes <= 1 {
                        req.shape.gpus_per_node <= max_free
                    } else {
                        req.shape.gpus_per_node == GPUS_PER_NODE && whole >= req.shape.nodes
                    };
                    assert!(
                        !fits,
                        "cycle {:?}: job {} ({}x{} GPUs) fits free GPUs after the cycle but waits",
                        key, k.job_id, req.shape.nodes, req.shape.gpus_per_node
                    );
                }
            }
        },
    );
    assert!(bad.is_empty(), "{bad:?}");
    cycles
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_jobs_on_128_nodes_are_placed_fairly_once_and_replayably() {
    let t0 = Instant::now();
    let mut stack = Stack::start().await.unwrap();
    let now = SystemClock.now_ms();
    admin::set_budget(&stack.js, now, files::parse_budget(BUDGET).unwrap())
        .await
        .unwrap();
    admin::register_nodes(
        &stack.js,
        now,
        files::parse_inventory(INVENTORY).unwrap().registrations(),
    )
    .await
    .unwrap();
    // A usage snapshot that puts research/vision well ahead and ops/debug behind, so ranking
    // starts uneven (the decision folds snapshots like any other event).
    let week = 7 * 24 * 3_600_000_i64;
    let capacity = u64::from(NODES * GPUS_PER_NODE) * week as u64;
    let snapshot = pb::UsageSnapshot {
        cluster: BIG.into(),
        window_end_ms: now,
        window_ms: week,
        through_sequence: 0,
        allocations: [
            ("research/nlp", 1, 4, 3),
            ("research/vision", 2, 4, 8),
            ("ops/infra", 1, 8, 1),
            ("ops/debug", 1, 8, 0),
        ]
        .iter()
        .map(|&(a, num, den, used_tenths)| pb::AllocationUsage {
            allocation: a.into(),
            charged_gpu_ms: capacity / 10 * used_tenths,
            allocated_gpu_ms: capacity / den * num,
        })
        .collect(),
        unallocated_gpu_ms: 0,
    };
    stack
        .append(
            subjects::usage(BIG),
            Body::UsageSnapshot(snapshot),
            "usage:big:1",
        )
        .await
        .unwrap();

    stack.start_submission(Default::default()).await.unwrap();
    let (decision1, explainer1) = start_decision(&stack, Duration::ZERO).await;
    let reasons1 = watch_reasons(explainer1);
    let launcher = start_launcher(&stack).await;
    let setup = t0.elapsed();

    // Submit everything, 50 requests in flight at a time.
    let t_submit = Instant::now();
    let mut accepted_ids = BTreeSet::new();
    for chunk in workload().chunks(50) {
        let replies = futures::future::join_all(chunk.iter().map(|r| stack.submit(r))).await;
        for reply in replies {
            accepted_ids.insert(accepted(&reply.unwrap()).unwrap().job_id.clone());
        }
    }
    assert_eq!(accepted_ids.len(), JOBS);
    let submitted_in = t_submit.elapsed();

    // Wait for every job to finish; halfway, replace the decision service with a fresh one.
    let mut finished = Follower::start(
        &stack.js,
        1,
        vec![subjects::job_event(BIG, "*", "job_finished")],
    )
    .await
    .unwrap();
    let mut done = BTreeSet::new();
    let mut decision2 = None;
    let mut decision1 = Some(decision1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while done.len() < JOBS {
        let entry = tokio::time::timeout_at(deadline, finished.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {JOBS} jobs finished in 120 s", done.len()))
            .unwrap()
            .unwrap();
        if let Ok(pb::Event {
            body: Some(Body::JobFinished(f)),
            ..
        }) = entry.event
        {
            done.insert(f.job_id);
        }
        if done.len() >= JOBS * 2 / 5
            && let Some(d) = decision1.take()
        {
            d.stop().await;
            let (d2, explainer2) = start_decision(&stack, Duration::from_millis(20)).await;
            decision2 = Some((d2, watch_reasons(explainer2)));
        }
    }
    let ran_in = t_submit.elapsed();
    launcher.stop().await;
    let (decision2, reasons2) = decision2.unwrap();
    decision2.stop().await;
    stack.stop_submission().await.unwrap();
    let (most1, codes1) = reasons1.await.unwrap();
    let (most2, codes2) = reasons2.await.unwrap();

    // Everything below is read from the log.
    let t_check = Instant::now();
    let entries = read_log(&stack.js, BIG, None).await.unwrap();
    let jobs = facts(&entries);
    assert_eq!(jobs.len(), JOBS);
    for (id, job) in &jobs {
        assert!(accepted_ids.contains(id));
        assert_eq!(job.placements.len(), 1, "job {id} placements");
        assert_eq!(
            (job.started, job.finished),
            (1, 1),
            "job {id} started/finished"
        );
    }
    let peak = assert_never_overcommitted(&entries);
    let pairs = assert_rank_order(&jobs, &entries);
    assert!(
        pairs > 1_000,
        "only {pairs} comparable pairs: the workload checks too little"
    );
    let cycles = assert_no_idle_while_work_fits(&entries);

    // Cycle numbers never go back in log order, including across the restart.
    let mut cycle_seq: Vec<(u64, u64)> = jobs.values().map(|j| j.placements[0]).collect();
    cycle_seq.sort();
    assert!(
        cycle_seq.windows(2).all(|w| w[0].1 <= w[1].1),
        "cycle numbers go back"
    );

    let report = audit(BIG, &entries);
    assert!(report.is_clean(), "divergences: {:#?}", report.divergences);
    assert_eq!(report.placements, JOBS);
    assert_eq!(report.cycles, cycles);
    assert_eq!(report.unpublished, 0, "every decided placement landed");
    let checked_in = t_check.elapsed();

    // The explainer saw contention, and why.
    assert!(
        most1.max(most2) > 0,
        "no job ever waited: the test has no contention"
    );
    assert!(
        codes1.contains("below_others_in_rank") || codes1.contains("too_large_for_free_nodes"),
        "{codes1:?}"
    );
    eprintln!(
        "decision e2e: setup {setup:?}, {JOBS} submissions in {submitted_in:?}, all finished after {ran_in:?}, \
         checks {checked_in:?}; {} log entries, {cycles} cycles with placements, peak {peak} of {} GPUs held, \
         {pairs} ordered pairs checked, most waiting {most1}/{most2}, reasons {codes1:?} {codes2:?}",
        entries.len(),
        NODES * GPUS_PER_NODE
    );
}
