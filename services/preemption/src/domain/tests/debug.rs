//! The debug allowance: debug jobs under it go before rank order, in the decision cycle and in
//! the preemption walk alike, and make room only with work past its minimum runtime that is
//! not another debug job.

use fairshare_decision::domain::decide;
use fairshare_events::pb::event::Body;

use super::support::{H, HOUR, MIN, leaf, orders};
use crate::domain::{FairShare, decide_preemptions_and_retry, fair_share};

/// Allocated time of each team in the snapshots: 1,000 GPU-hours.
const ALLOC: u64 = 1000 * HOUR as u64;
/// Usage that puts a team far over its share.
const HEAVY: u64 = 500 * HOUR as u64;

/// Two teams on one 8-GPU node; `b` is far over its share.
fn over_served_b() -> H {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n1", 8);
    h
}

fn placed(h: &H, now: i64) -> Vec<String> {
    decide(h.state.decision(), now)
        .placements
        .iter()
        .map(|p| p.job_id.to_owned())
        .collect()
}

#[test]
fn a_debug_job_is_placed_before_better_ranked_work() {
    let mut h = over_served_b();
    h.running(0, "b-long", "b", 8 * 3600, &[("n1", 7)]);
    h.submit(0, "a-train", "a", 1, 3600);
    h.submit(MIN, "b-debug", "b", 1, 600);
    let now = HOUR;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    assert_eq!(placed(&h, now), ["b-debug"], "the allowance goes first");

    h.state.set_debug_allowance_gpus(0);
    assert_eq!(placed(&h, now), ["a-train"], "without it, rank order");
}

#[test]
fn the_allowance_counts_debug_jobs_already_running() {
    let mut h = over_served_b();
    h.state.set_debug_allowance_gpus(4);
    // b already runs 4 GPUs of debug work: its allowance (4 GPUs here) is used up.
    h.running(0, "b-dbg1", "b", 600, &[("n1", 2)]);
    h.running(0, "b-dbg2", "b", 600, &[("n1", 2)]);
    h.running(0, "a-long", "a", 8 * 3600, &[("n1", 3)]);
    h.submit(0, "a-train", "a", 1, 3600);
    h.submit(MIN, "b-debug", "b", 1, 600);
    let now = 5 * MIN;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    assert_eq!(placed(&h, now), ["a-train"]);
}

#[test]
fn an_over_served_team_debugs_on_its_own_long_work() {
    let mut h = over_served_b();
    h.running(0, "b-long", "b", 3600, &[("n1", 4)]);
    h.running(0, "b-new", "b", 8 * 3600, &[("n1", 4)]);
    h.submit(0, "b-debug", "b", 1, 600);
    let now = 2 * HOUR;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    let out = h.decide(now);
    assert_eq!(orders(&out), [("b-long".to_owned(), "b-debug".to_owned())]);
    let Some(Body::PreemptionOrdered(p)) = out.first() else {
        panic!("{out:?}");
    };
    assert!(
        p.reason.contains("b's own work past its minimum runtime"),
        "{}",
        p.reason
    );
    assert_eq!(
        p.cause(),
        fairshare_events::pb::PreemptionCause::DebugAllowance
    );

    // Without the allowance the rank rule never takes a team's own work.
    h.state.set_debug_allowance_gpus(0);
    assert!(matches!(
        fair_share(&h.state, now, &h.cfg),
        FairShare::Blocked(line) if line.first.job_id == "b-debug"
    ));
}

#[test]
fn a_debug_job_never_takes_another_debug_job_or_protected_work() {
    let mut h = over_served_b();
    // b's own earlier debug job is past its minimum runtime (own work that is not debug work
    // would be fair game). a is under its share, so the rank rule gives b nothing of a's, and
    // a's job is protected anyway.
    h.running(0, "b-debug-old", "b", 600, &[("n1", 2)]);
    h.running(0, "a-long", "a", 8 * 3600, &[("n1", 6)]);
    h.submit(0, "b-debug", "b", 1, 600);
    let now = HOUR;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    let out = h.decide(now);
    assert!(
        !out.iter().any(|b| matches!(b, Body::PreemptionOrdered(_))),
        "{out:?}"
    );
}

#[test]
fn a_debug_job_takes_unallocated_work_of_anyone_before_better_ranked_waiters() {
    let mut h = over_served_b();
    h.running(0, "a-long", "a", 8 * 3600, &[("n1", 6)]);
    h.running(0, "a-free", "a", 0, &[("n1", 2)]);
    // a ranks first and waits for the same two GPUs.
    h.submit(0, "a-train", "a", 2, 3600);
    h.submit(MIN, "b-debug", "b", 2, 900);
    let now = HOUR;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    assert_eq!(
        orders(&h.decide(now)),
        [("a-free".to_owned(), "b-debug".to_owned())]
    );

    h.state.set_debug_allowance_gpus(0);
    assert_eq!(
        orders(&h.decide(now)),
        [("a-free".to_owned(), "b-debug".to_owned())],
        "without the allowance, b still goes first: it holds nothing, below its share floor"
    );
    h.state.set_share_floor(false);
    assert_eq!(
        orders(&h.decide(now)),
        [("a-free".to_owned(), "a-train".to_owned())],
        "without the floor either, window rank order"
    );
}

#[test]
fn a_debug_job_never_strands_a_whole_node() {
    let mut h = over_served_b();
    // b's own 8-GPU job is past its minimum runtime, but ordering it off for one GPU would
    // leave seven idle that no queued whole-node job could use.
    h.running(0, "b-long", "b", 3600, &[("n1", 8)]);
    h.submit(0, "b-debug", "b", 1, 600);
    let now = 2 * HOUR;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    assert!(orders(&h.decide(now)).is_empty());
    // It is still first in line: the node goes to it when b-long ends.
    h.ok(
        now,
        Body::JobFinished(fairshare_events::pb::JobFinished {
            job_id: "b-long".into(),
            exit_code: 0,
        }),
    );
    h.submit(now, "a-train", "a", 8, 3600);
    assert_eq!(placed(&h, now + 1), ["b-debug"]);
}

/// b runs one whole-node job (past its minimum runtime, started at 0, so it checkpoints every
/// 30 min) on n1, and waits with a one-GPU debug job; unallocated work of `fill` GPUs per job
/// queues for whatever GPUs free up.
fn own_whole_node_job_and_fill(fill: &[u32]) -> H {
    let mut h = over_served_b();
    h.running(0, "b-big", "b", 3600, &[("n1", 8)]);
    for (i, gpus) in fill.iter().enumerate() {
        h.submit(0, &format!("u-fill-{i}"), "a", *gpus, 0);
    }
    h.submit(0, "b-debug", "b", 1, 600);
    h
}

#[test]
fn a_debug_job_takes_its_own_whole_node_job_that_checkpointed_lately_when_the_rest_is_taken_up() {
    // 1 min past b-big's checkpoint at 2 h: 8 GPU-min lost, within 2 min per GPU. Queued jobs
    // of 4 + 2 + 1 GPUs fill the 7 GPUs b-debug leaves over.
    let mut h = own_whole_node_job_and_fill(&[4, 2, 1]);
    let now = 2 * HOUR + MIN;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    let out = h.decide(now);
    assert_eq!(orders(&out), [("b-big".to_owned(), "b-debug".to_owned())]);
    let Some(Body::PreemptionOrdered(p)) = out.first() else {
        panic!("{out:?}");
    };
    assert_eq!(
        p.cause(),
        fairshare_events::pb::PreemptionCause::DebugAllowance
    );
    assert!(
        p.reason.contains("b's own work past its minimum runtime"),
        "{}",
        p.reason
    );
    assert!(p.reason.contains("lost work 480 GPU-s"), "{}", p.reason);

    // 5 min past it (40 GPU-min) the order waits for the next checkpoint, at 2 h 30 min.
    let later = 2 * HOUR + 5 * MIN;
    let (out, retry) = decide_preemptions_and_retry(&h.state, later, &h.cfg);
    assert!(orders(&out).is_empty(), "{out:?}");
    assert_eq!(retry, Some(2 * HOUR + 30 * MIN));
}

#[test]
fn a_debug_job_takes_no_whole_node_job_whose_rest_would_sit_idle_or_that_spans_nodes() {
    let now = 2 * HOUR + MIN;
    // Queued jobs of 4 + 4 GPUs: 8 GPUs of work, but only one of them fits in the 7 left over.
    let mut h = own_whole_node_job_and_fill(&[4, 4]);
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    assert!(orders(&h.decide(now)).is_empty());
    // Queued jobs of 4 + 2 GPUs would fill only 6 of the 7 (the debug job itself, queued too,
    // is not counted).
    let mut h = own_whole_node_job_and_fill(&[4, 2]);
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    assert!(orders(&h.decide(now)).is_empty());
    // One more GPU of it, and the rest is taken up.
    h.submit(now, "u-fill-one", "a", 1, 0);
    assert_eq!(
        orders(&h.decide(now)),
        [("b-big".to_owned(), "b-debug".to_owned())]
    );

    // Enough queued work, but b's job holds two nodes: the rest of both would be left.
    // (Queued jobs of 4 + 2 + 1 fill 7 of one node's GPUs.)
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n1", 8);
    h.node("n2", 8);
    h.running(0, "b-wide", "b", 3600, &[("n1", 8), ("n2", 8)]);
    for (i, gpus) in [4, 2, 1].iter().enumerate() {
        h.submit(0, &format!("u-fill-{i}"), "a", *gpus, 0);
    }
    h.submit(0, "b-debug", "b", 1, 600);
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    assert!(orders(&h.decide(now)).is_empty());
}

#[test]
fn a_debug_job_takes_no_whole_node_job_of_another_allocation_by_its_own_rule() {
    // a's whole-node job, past its minimum runtime and fresh, with queued jobs to fill the rest:
    // b's debug job may not take it by the allowance's rule (only its own allocation's), and
    // the rank rule does not let it go either (a ranks first, and would fall below its floor;
    // without the share floor, by the window alone).
    let mut h = over_served_b();
    h.running(0, "a-big", "a", 3600, &[("n1", 8)]);
    for (i, gpus) in [4, 2, 1].iter().enumerate() {
        h.submit(0, &format!("u-fill-{i}"), "a", *gpus, 0);
    }
    h.submit(0, "b-debug", "b", 1, 600);
    let now = 2 * HOUR + MIN;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    assert!(orders(&h.decide(now)).is_empty());
    h.state.set_share_floor(false);
    assert!(orders(&h.decide(now)).is_empty());
}

/// A debug job of an allocation below its floor may take a whole job of one the window ranks
/// below it and that holds at least its floor, even one that leaves that allocation further
/// below its floor than the waiter's: the order says the window took it, not the floor, whose
/// comparison would be false.
#[test]
fn a_whole_job_taken_for_a_debug_job_by_the_window_is_not_filed_under_the_floor() {
    let mut h = over_served_b();
    // Floors of 4 GPUs each. a holds 3 (its own work, protected for an hour); b holds 5 in one
    // job past its minimum runtime, too big for the debug allowance to take.
    h.running(0, "a-long", "a", 3600, &[("n1", 3)]);
    h.running(0, "b-big", "b", 600, &[("n1", 5)]);
    h.submit(0, "a-debug", "a", 2, 600);
    // Just past b-big's checkpoint at 30 min: its lost work is within the floor's average
    // checkpoint limit.
    let now = 32 * MIN;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", HEAVY, ALLOC)]);
    let out = h.decide(now);
    assert_eq!(orders(&out), [("b-big".to_owned(), "a-debug".to_owned())]);
    let Some(Body::PreemptionOrdered(p)) = out.first() else {
        panic!("{out:?}");
    };
    // b ends 4 GPUs below its floor, a was 1 below its own.
    assert_eq!(
        p.cause(),
        fairshare_events::pb::PreemptionCause::Window,
        "{}",
        p.reason
    );
    assert!(
        p.reason.contains("allocation b ranks below a after charging the waiter 2 GPUs x 600 s, and held at least its share floor, so a debug job may take a whole job of it"),
        "{}",
        p.reason
    );
    assert!(!p.reason.contains("no further below"), "{}", p.reason);
}
