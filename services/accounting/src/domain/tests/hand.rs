//! Hand-computed cases: each states its arithmetic next to the assertion.

use super::support::*;
use crate::domain::{
    AccountUsage, Applied, FoldConfig, HOUR_MS, QueryError, Ratio, Skip, UsageFold,
};
use fairshare_events::pb;

const C: &str = "alpha";

/// A fold with window `w` fed `events` with sequences 1, 2, ...
fn fold(w: u64, events: &[pb::Event]) -> UsageFold {
    let mut f = UsageFold::new(FoldConfig::new(w).unwrap());
    for (i, e) in events.iter().enumerate() {
        f.apply(i as u64 + 1, e);
    }
    f
}

fn charged(f: &UsageFold, path: &str, now: i64) -> u64 {
    f.account(C, path, now).unwrap().charged_gpu_ms
}

fn allocated(f: &UsageFold, path: &str, now: i64) -> u64 {
    f.account(C, path, now).unwrap().allocated_gpu_ms
}

/// One 8-GPU node and a flat tree a:1 b:3 from t = 0.
fn base() -> Vec<pb::Event> {
    vec![
        node(0, C, "n1", 8),
        tree(0, C, vec![acc("a", 1, vec![]), acc("b", 3, vec![])]),
    ]
}

#[test]
fn straddling_interval_counts_only_its_overlap() {
    let mut events = base();
    // 4 GPUs (1 node x 4) run from 100 to 600.
    events.extend([
        submit(0, "j", C, "a", 1, 4, 60),
        placed(100, "j"),
        started(100, "j"),
        finished(600, "j"),
    ]);
    let f = fold(1_000, &events);
    // Window [-400, 600]: the whole run, 500 ms x 4.
    assert_eq!(charged(&f, "a", 600), 2_000);
    // Window [200, 1200]: overlap [200, 600] = 400 ms x 4.
    assert_eq!(charged(&f, "a", 1_200), 1_600);
    // Window [599, 1599]: 1 ms x 4.
    assert_eq!(charged(&f, "a", 1_599), 4);
    // Window [600, 1600]: nothing.
    assert_eq!(charged(&f, "a", 1_600), 0);
    assert_eq!(charged(&f, "b", 1_200), 0);
}

#[test]
fn running_job_counts_up_to_now() {
    let mut events = base();
    events.extend([
        submit(0, "j", C, "a", 1, 4, 60),
        placed(100, "j"),
        started(100, "j"),
    ]);
    let f = fold(1_000, &events);
    // [−300, 700] ∩ [100, 700] = 600 ms x 4.
    assert_eq!(charged(&f, "a", 700), 2_400);
    // Longer than the window: [1000, 2000] entirely, 1000 ms x 4.
    assert_eq!(charged(&f, "a", 2_000), 4_000);
    let report = f.window(C, 2_000).unwrap();
    assert_eq!(
        report.allocation("a").map(|r| r.charged_gpu_ms),
        Some(4_000)
    );
}

/// A start of a job no placement named (a launcher's mistake, or one forging starts to charge
/// another team) is refused, as the decision service refuses it: the two folds agree on what
/// runs, and nobody is charged for it.
#[test]
fn a_start_of_a_job_never_placed_charges_nothing() {
    let mut events = base();
    events.extend([submit(0, "j", C, "a", 1, 4, 60), started(100, "j")]);
    let f = fold(1_000, &events);
    assert_eq!(charged(&f, "a", 700), 0);
    let report = f.window(C, 700).unwrap();
    assert_eq!(report.allocation("a").map(|r| r.running_gpus), Some(0));
    assert_eq!(report.allocation("a").map(|r| r.queued_gpus), Some(4));
}

#[test]
fn unallocated_is_tracked_apart_and_never_charged() {
    let mut events = base();
    events.extend([
        // Unallocated (minimum runtime 0) job naming allocation "a": 2 GPUs from 100 to 300.
        // An allocated job of "a": 1 GPU from 200 to 400.
        submit(0, "free", C, "a", 1, 2, 0),
        submit(0, "paid", C, "a", 1, 1, 60),
        placed(100, "free"),
        started(100, "free"),
        placed(200, "paid"),
        started(200, "paid"),
        finished(300, "free"),
        finished(400, "paid"),
    ]);
    let f = fold(1_000, &events);
    let report = f.window(C, 500).unwrap();
    assert_eq!(report.unallocated_gpu_ms, 400); // 200 ms x 2
    assert_eq!(f.unallocated(C, 500).unwrap(), 400);
    assert_eq!(report.allocation("a").map(|r| r.charged_gpu_ms), Some(200)); // 200 ms x 1
    assert_eq!(report.subtree("a"), None);
    // At 250 (both jobs started, neither finished) the allocated job runs its 1 GPU;
    // unallocated work holds none against a floor.
    let mid = fold(1_000, &events[..events.len() - 2])
        .window(C, 250)
        .unwrap();
    assert_eq!(mid.allocation("a").map(|r| r.running_gpus), Some(1));
    assert_eq!(report.allocation("a").map(|r| r.running_gpus), Some(0));
    // At 150 the allocated job still waits for its GPU; the unallocated one waits for nothing
    // that counts against the allocation.
    let waiting = fold(1_000, &events[..events.len() - 4])
        .window(C, 150)
        .unwrap();
    assert_eq!(
        waiting
            .allocation("a")
            .map(|r| (r.running_gpus, r.queued_gpus)),
        Some((0, 1))
    );
    assert_eq!(mid.allocation("a").map(|r| r.queued_gpus), Some(0));
}

#[test]
fn capacity_change_mid_window() {
    let events = vec![
        node(0, C, "n1", 8),
        tree(0, C, vec![acc("a", 1, vec![]), acc("b", 3, vec![])]),
        node(400, C, "n2", 8),
        node_removed(700, C, "n1"),
    ];
    let f = fold(1_000, &events);
    // Capacity over [0, 1000]: 8 x 400 + 16 x 300 + 8 x 300 = 10_400 GPU-ms.
    let report = f.window(C, 1_000).unwrap();
    assert_eq!(report.capacity_gpu_ms, 10_400);
    // GPUs registered at the window's end: n2 alone.
    assert_eq!(report.cluster_gpus, 8);
    // a holds 1/4, b 3/4.
    assert_eq!(allocated(&f, "a", 1_000), 2_600);
    assert_eq!(allocated(&f, "b", 1_000), 7_800);
    // Window [500, 1500]: 16 x 200 + 8 x 800 = 9_600; a: 2_400.
    assert_eq!(allocated(&f, "a", 1_500), 2_400);
}

#[test]
fn budget_change_mid_window() {
    let events = vec![
        node(0, C, "n1", 8),
        tree(0, C, vec![acc("a", 1, vec![]), acc("b", 1, vec![])]),
        tree(500, C, vec![acc("a", 1, vec![]), acc("b", 3, vec![])]),
    ];
    let f = fold(1_000, &events);
    // a: 1/2 x 8 x 500 + 1/4 x 8 x 500 = 2_000 + 1_000.
    assert_eq!(allocated(&f, "a", 1_000), 3_000);
    // b: 1/2 x 8 x 500 + 3/4 x 8 x 500 = 2_000 + 3_000.
    assert_eq!(allocated(&f, "b", 1_000), 5_000);
    // Window [700, 1700]: only the second tree, a: 1/4 x 8 x 1000.
    assert_eq!(allocated(&f, "a", 1_700), 2_000);
}

#[test]
fn allocated_time_floors_once_per_tree() {
    let events = vec![
        node(0, C, "n1", 8),
        tree(0, C, vec![acc("a", 1, vec![]), acc("b", 2, vec![])]),
        tree(500, C, vec![acc("a", 2, vec![]), acc("b", 1, vec![])]),
    ];
    let f = fold(1_000, &events);
    // a: floor(1/3 x 4000) + floor(2/3 x 4000) = 1333 + 2666 = 3999 (the exact sum is 4000:
    // the documented rounding floors per tree in force).
    assert_eq!(allocated(&f, "a", 1_000), 3_999);
}

#[test]
fn subtrees_sum_their_allocations_and_hold_their_own_fraction() {
    let events = vec![
        node(0, C, "n1", 8),
        tree(
            0,
            C,
            vec![
                acc(
                    "org",
                    3,
                    vec![acc(
                        "p1",
                        1,
                        vec![acc("t1", 1, vec![]), acc("t2", 1, vec![])],
                    )],
                ),
                acc("solo", 1, vec![]),
            ],
        ),
        submit(0, "x", C, "org/p1/t1", 1, 2, 60),
        submit(0, "y", C, "org/p1/t2", 1, 3, 60),
        submit(0, "z", C, "solo", 1, 1, 60),
        placed(0, "x"),
        started(0, "x"),
        placed(0, "y"),
        started(0, "y"),
        placed(0, "z"),
        started(0, "z"),
    ];
    let f = fold(1_000, &events);
    let now = 100;
    assert_eq!(charged(&f, "org/p1/t1", now), 200);
    assert_eq!(charged(&f, "org/p1", now), 500);
    assert_eq!(charged(&f, "org", now), 500);
    assert_eq!(charged(&f, "solo", now), 100);
    assert_eq!(charged(&f, "nope", now), 0);
    // org holds 3/4 of 8 x 100 GPU-ms; t1 holds 3/8.
    assert_eq!(allocated(&f, "org", now), 600);
    assert_eq!(allocated(&f, "org/p1/t1", now), 300);
    let report = f.window(C, now).unwrap();
    let paths = |rows: &[AccountUsage]| rows.iter().map(|r| r.path.clone()).collect::<Vec<_>>();
    assert_eq!(
        paths(&report.allocations),
        vec!["org/p1/t1", "org/p1/t2", "solo"]
    );
    assert_eq!(paths(&report.subtrees), vec!["org", "org/p1"]);
    let cluster = f.cluster(C).unwrap();
    assert!(cluster.has_account("org/p1") && cluster.has_account("solo"));
    assert!(!cluster.has_account("org/p") && !cluster.has_account("nope"));
    assert_eq!(
        report.subtree("org/p1").map(|r| r.charged_gpu_ms),
        Some(500)
    );
}

#[test]
fn duplicate_changes_nothing() {
    let mut events = base();
    events.extend([
        submit(0, "j", C, "a", 1, 4, 60),
        placed(100, "j"),
        started(100, "j"),
        finished(600, "j"),
    ]);
    let mut f = fold(1_000, &events);
    let before = f.clone();
    // Redelivery of the start (sequence 4) and of the submission (sequence 3).
    assert_eq!(
        f.apply(4, &started(100, "j")),
        Applied::Skipped(Skip::DuplicateSequence)
    );
    assert_eq!(
        f.apply(3, &events[2]),
        Applied::Skipped(Skip::DuplicateSequence)
    );
    // The last applied sequence itself is a redelivery too.
    assert_eq!(
        f.apply(5, &finished(600, "j")),
        Applied::Skipped(Skip::DuplicateSequence)
    );
    assert_eq!(f.counts().duplicate_sequence, 3);
    assert_eq!(f.window(C, 1_200), before.window(C, 1_200));
    assert_eq!(f.last_applied(), before.last_applied());
    assert_eq!(f.ledger(C, 10 * HOUR_MS), before.ledger(C, 10 * HOUR_MS));
    assert_eq!(f.footprint(), before.footprint());
    // The same events published again with new sequences are refused by the job's state.
    assert_eq!(
        f.apply(10, &started(650, "j")),
        Applied::Skipped(Skip::StartNotPlaced)
    );
    assert_eq!(
        f.apply(11, &finished(650, "j")),
        Applied::Skipped(Skip::AlreadyEnded)
    );
    assert_eq!(
        f.apply(12, &events[2]),
        Applied::Skipped(Skip::DuplicateSubmit)
    );
    assert_eq!(f.window(C, 1_200), before.window(C, 1_200));
}

#[test]
fn unknown_and_out_of_order_job_events_are_ignored_and_counted() {
    let mut f = fold(1_000, &base());
    assert_eq!(
        f.apply(10, &started(5, "ghost")),
        Applied::Skipped(Skip::UnknownJob)
    );
    f.apply(11, &submit(10, "j", C, "a", 1, 1, 60));
    assert_eq!(
        f.apply(12, &preempted(20, "j")),
        Applied::Skipped(Skip::PreemptNotRunning)
    );
    assert_eq!(
        f.apply(13, &requeued(20, "j")),
        Applied::Skipped(Skip::RequeueNotPreempted)
    );
    assert_eq!(f.counts().ignored(), 3);
    assert_eq!(f.counts().unknown_job, 1);
    assert_eq!(charged(&f, "a", 100), 0);
}

#[test]
fn preempted_job_requeues_and_starts_again() {
    let mut events = base();
    events.extend([
        resumable(submit(0, "j", C, "a", 2, 4, 60)),
        placed(100, "j"),
        started(100, "j"),
        preempted(300, "j"),
        requeued(300, "j"),
        placed(500, "j"),
        started(500, "j"),
        failed(550, "j"),
    ]);
    let f = fold(1_000, &events);
    // 8 GPUs for 200 ms, then for 50 ms.
    assert_eq!(charged(&f, "a", 600), 8 * 250);
}

#[test]
fn a_job_ordered_off_before_its_launcher_started_it_stops_waiting() {
    // Placed at 100, stopped at 200 before any JobStarted (the launcher confirms the order
    // for a job it never started, or the service kills it at the deadline).
    let mut events = base();
    events.extend([
        submit(0, "once", C, "a", 1, 2, 60),
        resumable(submit(0, "again", C, "b", 1, 2, 60)),
        placed(100, "once"),
        placed(100, "again"),
    ]);
    let mut f = fold(1_000, &events);
    let queued = |f: &UsageFold, path: &str| f.account(C, path, 300).unwrap().queued_gpus;
    assert_eq!((queued(&f, "a"), queued(&f, "b")), (2, 2));
    let n = events.len() as u64;
    assert_eq!(f.apply(n + 1, &preempted(200, "once")), Applied::Changed);
    assert_eq!(f.apply(n + 2, &preempted(200, "again")), Applied::Changed);
    // Neither waits any more: the one that cannot resume has ended, the other waits for its
    // requeue.
    assert_eq!((queued(&f, "a"), queued(&f, "b")), (0, 0));
    assert_eq!(
        f.apply(n + 3, &requeued(250, "once")),
        Applied::Skipped(Skip::RequeueNotPreempted)
    );
    assert_eq!(f.apply(n + 4, &requeued(250, "again")), Applied::Changed);
    assert_eq!((queued(&f, "a"), queued(&f, "b")), (0, 2));
    // Nothing was charged: neither ran.
    assert_eq!((charged(&f, "a", 300), charged(&f, "b", 300)), (0, 0));
}

#[test]
fn a_preempted_job_that_cannot_resume_has_ended() {
    let mut events = base();
    events.extend([
        submit(0, "j", C, "a", 1, 4, 60),
        placed(50, "j"),
        placed(100, "j"),
        started(100, "j"),
        preempted(300, "j"),
    ]);
    let mut f = fold(1_000, &events);
    // 4 GPUs for 200 ms; then it is no longer live: a late stop is a double stop, not a stop
    // of a preempted job (which would keep it in the live table for good).
    assert_eq!(charged(&f, "a", 600), 4 * 200);
    let n = events.len() as u64;
    assert_eq!(
        f.apply(n + 1, &finished(400, "j")),
        Applied::Skipped(Skip::AlreadyEnded)
    );
    assert_eq!(
        f.apply(n + 2, &placed(400, "j")),
        Applied::Skipped(Skip::PlaceNotQueued)
    );
}

#[test]
fn event_times_never_go_backwards() {
    let mut events = base();
    events.extend([
        submit(0, "j", C, "a", 1, 1, 60),
        placed(500, "j"),
        started(500, "j"),
    ]);
    let mut f = fold(1_000, &events);
    // A stop stamped before the start takes effect at the cluster's clock (500).
    assert_eq!(f.apply(10, &finished(400, "j")), Applied::Clamped);
    assert_eq!(charged(&f, "a", 900), 0);
    assert_eq!(f.counts().clamped, 1);
    assert_eq!(f.cluster(C).and_then(|c| c.clock()), Some(500));
}

#[test]
fn queries_before_the_clock_or_of_unknown_clusters_fail() {
    let f = fold(1_000, &base());
    assert!(matches!(
        f.window("beta", 0),
        Err(QueryError::UnknownCluster { .. })
    ));
    let mut g = f.clone();
    g.apply(10, &node(50, C, "n2", 8));
    assert_eq!(
        g.window(C, 49),
        Err(QueryError::NowBeforeClock {
            cluster: C.into(),
            now: 49,
            clock: 50
        })
    );
}

#[test]
fn invalid_budget_tree_keeps_the_tree_in_force() {
    let mut events = base();
    events.push(tree(100, C, vec![]));
    let mut f = fold(1_000, &events);
    assert_eq!(f.counts().invalid_budget_tree, 1);
    assert_eq!(allocated(&f, "a", 1_000), 2_000);
    assert_eq!(
        f.apply(20, &node_removed(200, C, "n9")),
        Applied::Skipped(Skip::UnknownNode)
    );
}

#[test]
fn ledger_caps_owed_at_demand_and_allocation() {
    let h = HOUR_MS;
    let events = vec![
        node(0, C, "n1", 10),
        tree(0, C, vec![acc("a", 1, vec![]), acc("b", 1, vec![])]),
        // 8 GPUs queued from 0, running from 0.5 h to 2 h.
        // Unallocated: 2 GPUs during the first hour.
        submit(0, "j", C, "a", 1, 8, 60),
        submit(0, "u", C, "b", 1, 2, 0),
        placed(0, "u"),
        started(0, "u"),
        placed(h / 2, "j"),
        started(h / 2, "j"),
        finished(h, "u"),
        finished(2 * h, "j"),
    ];
    let f = fold(7 * 24 * h as u64, &events);
    let report = f.ledger(C, 2 * h).unwrap();
    let a = report.allocation("a").unwrap().totals;
    // Hour 0: demand 8 x 1 h = 28.8 M; a's allocation 5 GPU x 1 h = 18 M owed; 14.4 M run.
    // Hour 1: demand 28.8 M, owed 18 M, run 28.8 M (18 M of it counts).
    assert_eq!(a.demand_gpu_ms, 2 * 28_800_000);
    assert_eq!(a.owed_gpu_ms, 2 * 18_000_000);
    assert_eq!(a.delivered_gpu_ms, 14_400_000 + 28_800_000);
    assert_eq!(a.delivered_owed_gpu_ms, 14_400_000 + 18_000_000);
    assert_eq!(
        a.delivered_ratio(),
        Ratio {
            num: 32_400_000,
            den: 36_000_000
        }
    );
    assert!(report.allocation("b").is_none()); // b had no allocated demand.
    assert_eq!(report.overall, a);
    assert_eq!(report.unallocated_delivered_gpu_ms, 7_200_000);
    assert_eq!(report.through_ms, 2 * h);
    // Later hours add nothing: the job has ended.
    assert_eq!(f.ledger(C, 50 * h).unwrap().overall, a);
}

#[test]
fn ledger_counts_silent_hours_while_a_job_runs() {
    let h = HOUR_MS;
    let events = vec![
        node(0, C, "n1", 4),
        tree(0, C, vec![acc("a", 1, vec![])]),
        submit(0, "j", C, "a", 1, 2, 60),
        placed(0, "j"),
        started(0, "j"),
    ];
    let f = fold(7 * 24 * h as u64, &events);
    // Ten silent hours: demand 2 GPU x 10 h, allocation 4 GPU x 10 h, owed = demand, all run.
    let t = f.ledger(C, 10 * h + 5).unwrap().overall;
    assert_eq!(t.owed_gpu_ms, 20 * h as u128);
    assert_eq!(t.delivered_owed_gpu_ms, 20 * h as u128);
    // Folding an event at hour 10 closes the same hours into the state.
    let mut g = f.clone();
    g.apply(10, &finished(10 * h + 5, "j"));
    assert_eq!(g.ledger(C, 10 * h + 5).unwrap().overall, t);
    assert_eq!(
        g.ledger(C, 11 * h).unwrap().overall.owed_gpu_ms,
        20 * h as u128 + 10
    );
}

#[test]
fn memory_follows_the_window_not_history() {
    // W = 1 h; one job starting and ending every minute on two allocations, for 10 h and 100 h.
    let h = HOUR_MS;
    let run = |hours: i64| {
        let mut f = UsageFold::new(FoldConfig::new(h as u64).unwrap());
        let mut seq = 0;
        let mut push = |f: &mut UsageFold, e: pb::Event| {
            seq += 1;
            f.apply(seq, &e);
        };
        push(&mut f, node(0, C, "n1", 8));
        push(
            &mut f,
            tree(0, C, vec![acc("a", 1, vec![]), acc("b", 1, vec![])]),
        );
        for i in 0..hours * 60 {
            let t = i * 60_000;
            let id = format!("j{i}");
            let alloc = if i % 2 == 0 { "a" } else { "b" };
            push(&mut f, submit(t, &id, C, alloc, 1, 1, 60));
            push(&mut f, started(t + 1_000, &id));
            push(&mut f, finished(t + 30_000, &id));
        }
        f
    };
    let short = run(10).footprint();
    let long = run(100).footprint();
    // Everything within about two hours (the window plus the hour not yet swept) is held.
    assert!(long.curve_points <= 2 * 2 * 120 + 8, "{long:?}");
    assert!(long.jobs <= 2 * 60 + 1, "{long:?}");
    assert_eq!(long.curve_points, short.curve_points);
    assert_eq!(long.jobs, short.jobs);
    assert_eq!(long.budget_epochs, 1);
}

#[test]
fn stale_resubmission_of_a_forgotten_job_is_refused() {
    let h = HOUR_MS;
    let mut events = base();
    events.extend([
        submit(0, "j", C, "a", 1, 1, 60),
        placed(0, "j"),
        started(0, "j"),
        finished(10, "j"),
        // Hours later the job is forgotten (W = 1 h)...
        node(5 * h, C, "n2", 8),
    ]);
    let mut f = fold(h as u64, &events);
    assert_eq!(f.footprint().jobs, 0);
    // ...and its submission re-published with a new sequence changes nothing.
    assert_eq!(f.apply(50, &events[2]), Applied::Skipped(Skip::StaleSubmit));
    assert_eq!(
        f.apply(51, &started(5 * h, "j")),
        Applied::Skipped(Skip::UnknownJob)
    );
    assert_eq!(f.ledger(C, 10 * h).unwrap().overall.demand_gpu_ms, 10);
    // The boundary: stamped exactly at the window start (clock - W = 4 h) is stale, one ms
    // later is a new job.
    assert_eq!(
        f.apply(52, &submit(4 * h, "k", C, "a", 1, 1, 60)),
        Applied::Skipped(Skip::StaleSubmit)
    );
    assert_eq!(
        f.apply(53, &submit(4 * h + 1, "k", C, "a", 1, 1, 60)),
        Applied::Clamped
    );
}

#[test]
fn ended_jobs_are_remembered_while_inside_the_window() {
    let h = HOUR_MS;
    let mut events = base();
    events.extend([
        submit(0, "j", C, "a", 1, 1, 60),
        placed(0, "j"),
        started(0, "j"),
        finished(10, "j"),
        // Entering hour 1 evicts what ended by 1 h + 5 - W = 5 ms: not the job (ended at 10).
        node(h + 5, C, "n2", 8),
    ]);
    let mut f = fold(h as u64, &events);
    assert_eq!(f.footprint().jobs, 1);
    assert_eq!(
        f.apply(10, &finished(h + 6, "j")),
        Applied::Skipped(Skip::AlreadyEnded)
    );
    // Entering hour 2 evicts what ended by 1 h: now the job is forgotten.
    f.apply(11, &node(2 * h, C, "n3", 8));
    assert_eq!(f.footprint().jobs, 0);
    assert_eq!(
        f.apply(12, &finished(2 * h, "j")),
        Applied::Skipped(Skip::UnknownJob)
    );
}

#[test]
fn snapshot_carries_the_sequence_and_rows() {
    let mut events = base();
    events.extend([
        submit(0, "j", C, "a", 1, 4, 60),
        placed(0, "j"),
        started(0, "j"),
    ]);
    let f = fold(1_000, &events);
    let snap = f
        .window(C, 100)
        .unwrap()
        .to_snapshot(f.last_applied(), f.config().window_ms());
    assert_eq!(snap.through_sequence, 5);
    assert_eq!(snap.window_ms, 1_000);
    assert_eq!(snap.window_end_ms, 100);
    let a = &snap.allocations[0];
    assert_eq!(
        (a.allocation.as_str(), a.charged_gpu_ms, a.allocated_gpu_ms),
        ("a", 400, 200)
    );
}

/// An event stamped far in the future by a broken clock takes effect no later than a minute
/// after the stream stored it: the cluster's clock does not jump, the running job is charged
/// for what it ran, and later submissions are not refused as stale.
#[test]
fn a_future_stamp_takes_effect_when_the_log_stored_it() {
    const DAY: i64 = 24 * HOUR_MS;
    let mut events = base();
    events.extend([
        submit(1_000, "j", C, "a", 1, 4, 60),
        placed(2_000, "j"),
        started(2_000, "j"),
        // A node agent whose clock says the year 292 million.
        node(i64::MAX, C, "n2", 8),
        finished(602_000, "j"),
        submit(700_000, "k", C, "b", 1, 2, 60),
    ]);
    // Each entry stored when it was written; the bad one at 3_000.
    let stored = [0, 0, 1_000, 2_000, 2_000, 3_000, 602_000, 700_000];
    let mut f = UsageFold::new(FoldConfig::new(7 * DAY as u64).unwrap());
    for (i, (e, s)) in events.iter().zip(stored).enumerate() {
        let applied = f.apply_stored(i as u64 + 1, e, s);
        assert!(
            !matches!(applied, Applied::Skipped(_)),
            "entry {i}: {applied:?}"
        );
    }
    // j ran 600 s on 4 GPUs: 2.4 M GPU-ms, charged as it ran.
    assert_eq!(charged(&f, "a", 700_000), 2_400_000);
    // k was accepted (a job of b's is known).
    assert!(f.window(C, 700_000).is_ok());

    // Unclamped, the same log breaks the cluster: every later event takes effect at the far
    // time, k is refused as stale, and j is charged a whole window.
    let mut bad = UsageFold::new(FoldConfig::new(7 * DAY as u64).unwrap());
    let outcomes: Vec<Applied> = events
        .iter()
        .enumerate()
        .map(|(i, e)| bad.apply(i as u64 + 1, e))
        .collect();
    assert_eq!(outcomes[7], Applied::Skipped(Skip::StaleSubmit));
}

/// Past its order's grace deadline a job counts as killed (SPEC section 2): charging stops
/// there, whenever its kill is reported (late, after a preemption-service outage) and whatever
/// else happened in the cluster meanwhile.
#[test]
fn an_order_stops_the_charge_at_its_grace_deadline_however_late_the_kill() {
    let mut events = base();
    // 4 GPUs from 100; ordered off at 200 with a deadline at 300; another job's events at 500
    // move the clock past it; the kill is reported at 900 and the job requeued.
    events.extend([
        resumable(submit(0, "j", C, "a", 1, 4, 60)),
        placed(100, "j"),
        started(100, "j"),
        ordered(200, "j", 300),
        submit(500, "k", C, "b", 1, 1, 60),
        killed(900, "j"),
        requeued(900, "j"),
    ]);
    let f = fold(10_000, &events);
    // 200 ms x 4 GPUs, not 800 ms x 4.
    assert_eq!(charged(&f, "a", 1_000), 800);
    assert_eq!(f.counts().ignored(), 0, "{:?}", f.counts());

    // With nothing after the deadline but the kill, the same.
    let mut quiet = base();
    quiet.extend([
        resumable(submit(0, "j", C, "a", 1, 4, 60)),
        placed(100, "j"),
        started(100, "j"),
        ordered(200, "j", 300),
        killed(900, "j"),
    ]);
    assert_eq!(charged(&fold(10_000, &quiet), "a", 1_000), 800);

    // Before any event reaches the deadline, a query past it counts it as passed.
    let mut waiting = base();
    waiting.extend([
        resumable(submit(0, "j", C, "a", 1, 4, 60)),
        placed(100, "j"),
        started(100, "j"),
        ordered(200, "j", 300),
    ]);
    let f = fold(10_000, &waiting);
    assert_eq!(
        charged(&f, "a", 250),
        600,
        "still charged before its deadline"
    );
    assert_eq!(charged(&f, "a", 1_000), 800);
}

/// A job that stops before its deadline stops then; the deadline of a run that is over does
/// nothing to the next run, and the earliest of two orders' deadlines counts.
#[test]
fn a_stop_before_the_deadline_counts_and_a_later_run_is_charged_in_full() {
    let mut events = base();
    events.extend([
        resumable(submit(0, "j", C, "a", 1, 4, 60)),
        placed(100, "j"),
        started(100, "j"),
        ordered(200, "j", 400),
        // Confirmed at 250: 150 ms x 4.
        preempted(250, "j"),
        requeued(250, "j"),
        // Its next run, from 500 to 1500, is charged whole although 400 has passed.
        placed(500, "j"),
        started(500, "j"),
        finished(1_500, "j"),
    ]);
    let f = fold(10_000, &events);
    assert_eq!(charged(&f, "a", 2_000), 150 * 4 + 1_000 * 4);
    assert_eq!(f.counts().ignored(), 0, "{:?}", f.counts());

    // Ordered off three times: the earliest deadline (700), not the first one (900).
    let mut events = base();
    events.extend([
        submit(0, "m", C, "b", 1, 2, 60),
        placed(600, "m"),
        started(600, "m"),
        ordered(610, "m", 900),
        ordered(620, "m", 700),
        ordered(630, "m", 800),
        finished(2_000, "m"),
    ]);
    let f = fold(10_000, &events);
    assert_eq!(charged(&f, "b", 2_000), 100 * 2);
    assert_eq!(f.counts().ignored(), 0, "{:?}", f.counts());
}

/// A job that cannot resume ends at its kill; a job placed and not started when its deadline
/// passes stops being demand then; either way the late stop is not counted twice.
#[test]
fn an_overdue_job_ends_or_requeues_once_its_stop_comes() {
    let mut events = base();
    events.extend([
        submit(0, "j", C, "a", 1, 4, 60),
        placed(100, "j"),
        started(100, "j"),
        ordered(200, "j", 300),
        killed(900, "j"),
        // Not resumable: ended, so a requeue is refused.
        requeued(900, "j"),
    ]);
    let f = fold(10_000, &events);
    assert_eq!(charged(&f, "a", 1_000), 800);
    assert_eq!(f.counts().requeue_not_preempted, 1, "{:?}", f.counts());
    assert_eq!(f.job_cluster("j"), None, "ended");
}
