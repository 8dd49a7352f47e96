//! Hand-computed tests of each rule. Usage snapshots end at the decision time, so the ranking
//! inputs are exactly the snapshot's figures plus what is left of running jobs' minimum
//! runtimes (see `fairshare_decision::domain::rank::leaf_usage`).

use fairshare_events::pb::{self, PreemptionCause, event::Body};

use super::support::{CLUSTER, H, HOUR, MIN, SEC, causes, leaf, orders, render, victims};
use crate::domain::{
    Config, FairShare, NoVictims, decide_preemptions_and_retry, fair_share, next_due,
    select_victims, stamp_cycle,
};

/// Allocated time of each team in the snapshots: 1,000 GPU-hours.
const ALLOC: u64 = 1000 * HOUR as u64;

fn gpu_h(h: f64) -> u64 {
    (h * HOUR as f64) as u64
}

/// A snapshot at `now` in which `a` has used nothing and `b` has used `b_used` GPU-ms.
fn usage(h: &mut H, now: i64, b_used: u64) {
    h.snapshot(now, &[("a", 0, ALLOC), ("b", b_used, ALLOC)]);
}

#[test]
fn never_inside_the_minimum_runtime() {
    let mut h = H::new();
    // The window rule alone: these allocations hold no more than their share floor.
    h.state.set_share_floor(false);
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "v", "b", 2 * 3600, &[("n1", 8)]);
    h.submit(10 * MIN, "w", "a", 8, 3600);
    let now = 2 * HOUR - 1;
    usage(&mut h, now, gpu_h(100.0));
    assert_eq!(h.decide(now), vec![]);
    assert!(matches!(
        fair_share(&h.state, now, &h.cfg),
        FairShare::Blocked(line) if line.first.job_id == "w"
    ));
    assert_eq!(
        select_victims(&h.state, "w", now, &h.cfg),
        Err(NoVictims::WouldNotFit("w".into()))
    );
    // The first instant it is past its minimum runtime, it may go.
    let now = 2 * HOUR;
    usage(&mut h, now, gpu_h(100.0));
    assert_eq!(
        render(&h.decide(now)),
        vec![format!("order v for \"w\" by {}", now + 30 * SEC)]
    );
}

#[test]
fn the_cap_limits_protection() {
    let mut h = H::new();
    // The window rule alone: these allocations hold no more than their share floor.
    h.state.set_share_floor(false);
    h.two_teams();
    h.node("n1", 8);
    // Asks for 10 h of protection (an old event, above the cap); 8 h is all it gets.
    h.running(0, "v", "b", 10 * 3600, &[("n1", 8)]);
    h.submit(0, "w", "a", 8, 3600);
    let now = 8 * HOUR - 1;
    usage(&mut h, now, gpu_h(100.0));
    assert_eq!(h.decide(now), vec![]);
    let now = 8 * HOUR;
    usage(&mut h, now, gpu_h(100.0));
    assert_eq!(victims(&h.decide(now)), vec!["v"]);
}

#[test]
fn never_when_the_waiter_would_still_not_fit() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.node("n2", 8);
    // Each node: 4 GPUs of unallocated work (always preemptible) and 4 protected GPUs.
    for n in ["n1", "n2"] {
        h.running(0, &format!("u-{n}"), "b", 0, &[(n, 4)]);
        h.running(0, &format!("p-{n}"), "b", 8 * 3600, &[(n, 4)]);
    }
    h.submit(0, "w", "a", 8, 3600);
    h.submit_full(0, "wide", "a", 2, 8, 3600, -1, true);
    let now = HOUR;
    usage(&mut h, now, gpu_h(100.0));
    // 8 GPUs on one node cannot be freed: order nothing, not even the unallocated work.
    assert_eq!(h.decide(now), vec![]);
    assert_eq!(
        select_victims(&h.state, "w", now, &h.cfg),
        Err(NoVictims::WouldNotFit("w".into()))
    );
    // Nor two whole nodes.
    assert_eq!(
        select_victims(&h.state, "wide", now, &h.cfg),
        Err(NoVictims::WouldNotFit("wide".into()))
    );
}

#[test]
fn orders_only_a_set_that_makes_it_fit() {
    let mut h = H::new();
    // The window rule alone: these allocations hold no more than their share floor.
    h.state.set_share_floor(false);
    h.two_teams();
    h.node("n1", 8);
    h.node("n2", 8);
    h.running(0, "u1", "b", 0, &[("n1", 4)]);
    h.running(0, "p1", "b", 8 * 3600, &[("n1", 4)]);
    // On n2 the allocated job's minimum runtime (30 min) is over.
    h.running(0, "u2", "b", 0, &[("n2", 4)]);
    h.running(0, "x2", "b", 1800, &[("n2", 4)]);
    h.submit(0, "w", "a", 8, 3600);
    let now = HOUR;
    usage(&mut h, now, gpu_h(100.0));
    // Both jobs on n2 are needed; nothing on n1 is touched.
    assert_eq!(
        orders(&h.decide(now)),
        vec![("u2".into(), "w".into()), ("x2".into(), "w".into())]
    );
}

#[test]
fn unallocated_work_goes_before_allocated_work_on_equal_loss() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "u", "b", 0, &[("n1", 4)]);
    h.running(0, "x", "b", 1800, &[("n1", 4)]);
    h.submit(0, "w", "a", 4, 900);
    // Both ran 2 h 10 min: 10 min since their last checkpoint, 4 GPUs each.
    let now = 2 * HOUR + 10 * MIN;
    usage(&mut h, now, gpu_h(100.0));
    let plan = select_victims(&h.state, "w", now, &h.cfg).unwrap();
    assert_eq!(plan.victims.len(), 1);
    assert_eq!(plan.victims[0].job_id, "u");
    assert_eq!(plan.lost_gpu_ms, 4 * 10 * MIN as u128);
    assert_eq!(victims(&h.decide(now)), vec!["u"]);
}

#[test]
fn fewest_gpu_hours_of_lost_work() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    // n1: one 4-GPU job 25 min past its checkpoint (100 GPU-min), two 2-GPU jobs 10 min past
    // theirs (20 GPU-min each).
    h.running(45 * MIN, "j4", "b", 0, &[("n1", 4)]);
    h.running(0, "j2a", "b", 0, &[("n1", 2)]);
    h.running(0, "j2b", "b", 0, &[("n1", 2)]);
    h.submit(0, "w", "a", 4, 3600);
    let now = HOUR + 10 * MIN;
    usage(&mut h, now, gpu_h(100.0));
    let plan = select_victims(&h.state, "w", now, &h.cfg).unwrap();
    let ids: Vec<_> = plan.victims.iter().map(|v| v.job_id).collect();
    assert_eq!(ids, vec!["j2a", "j2b"]);
    assert_eq!(plan.lost_gpu_ms, 40 * MIN as u128);

    // n2: 4 GPUs 5 min past a checkpoint (20 GPU-min) beside protected work: cheaper still.
    h.node("n2", 8);
    h.running(HOUR + 5 * MIN, "j5", "b", 0, &[("n2", 4)]);
    h.running(HOUR + 5 * MIN, "p", "b", 8 * 3600, &[("n2", 4)]);
    usage(&mut h, now, gpu_h(100.0));
    let plan = select_victims(&h.state, "w", now, &h.cfg).unwrap();
    assert_eq!(plan.nodes, vec!["n2"]);
    assert_eq!(plan.victims[0].job_id, "j5");
    assert_eq!(plan.lost_gpu_ms, 20 * MIN as u128);
    assert_eq!(victims(&h.decide(now)), vec!["j5"]);
}

#[test]
fn a_job_that_is_not_resumable_loses_its_whole_run() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.node("n2", 8);
    // n1: 4 GPUs, ran 70 min, resumable: 10 min lost (40 GPU-min).
    h.running(0, "r", "b", 0, &[("n1", 4)]);
    h.running(0, "p1", "b", 8 * 3600, &[("n1", 4)]);
    // n2: 4 GPUs, ran 35 min, not resumable: 35 min lost (140 GPU-min), though only 5 min
    // past a checkpoint.
    h.running_full(35 * MIN, "nr", "b", 0, &[("n2", 4)], false);
    h.running(0, "p2", "b", 8 * 3600, &[("n2", 4)]);
    h.submit(0, "w", "a", 4, 3600);
    let now = HOUR + 10 * MIN;
    usage(&mut h, now, gpu_h(100.0));
    let plan = select_victims(&h.state, "w", now, &h.cfg).unwrap();
    assert_eq!(plan.victims[0].job_id, "r");
    assert_eq!(plan.lost_gpu_ms, 40 * MIN as u128);
}

/// One 8-GPU node held by `x` of `b` (past its 1 h minimum runtime); `w` of `a` waits for 8 GPUs
/// with 1 h minimum runtime, so charging `a` adds 8 GPU-hours. `a` has used nothing.
fn rank_case(b_used: u64, hysteresis_permille: u32) -> Vec<Body> {
    let mut h = H::new();
    // The window rule alone: these allocations hold no more than their share floor.
    h.state.set_share_floor(false);
    h.cfg.hysteresis_permille = hysteresis_permille;
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "x", "b", 3600, &[("n1", 8)]);
    h.submit(0, "w", "a", 8, 3600);
    let now = 5 * HOUR;
    usage(&mut h, now, b_used);
    h.decide(now)
}

#[test]
fn allocated_victims_must_rank_below_the_waiter_after_it_is_charged() {
    // b used 6 GPU-h: a (0) ranks first, but not once charged 8 GPU-h. No preemption.
    assert_eq!(rank_case(gpu_h(6.0), 0), vec![]);
    // b used 8.5 GPU-h: below a even after the charge (8 < 8.5)...
    assert_eq!(victims(&rank_case(gpu_h(8.5), 0)), vec!["x"]);
    // ...but within the default 10 % margin (8 x 1.1 = 8.8 > 8.5): not worth a restart.
    assert_eq!(rank_case(gpu_h(8.5), 100), vec![]);
    // 8.8 GPU-h is exactly at the margin: preempt.
    assert_eq!(victims(&rank_case(gpu_h(8.8), 100)), vec!["x"]);
    assert_eq!(rank_case(gpu_h(8.8) - 1, 100), vec![]);
}

#[test]
fn a_one_gpu_waiters_window_reason_says_one_gpu() {
    let mut h = H::new();
    h.state.set_share_floor(false);
    h.cfg.hysteresis_permille = 0;
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "x", "b", 3600, &[("n1", 8)]);
    h.submit(0, "w", "a", 1, 3600);
    let now = 5 * HOUR;
    usage(&mut h, now, gpu_h(8.5));
    let out = h.decide(now);
    let Some(Body::PreemptionOrdered(p)) = out.first() else {
        panic!("{out:?}")
    };
    assert!(
        p.reason
            .contains("allocation b ranks below a after charging the waiter 1 GPU x 3600 s"),
        "{}",
        p.reason
    );
}

#[test]
fn never_a_victim_of_the_waiters_own_allocation() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "x", "a", 3600, &[("n1", 8)]);
    h.submit(0, "w", "a", 8, 3600);
    let now = 5 * HOUR;
    h.snapshot(now, &[("a", gpu_h(100.0), ALLOC), ("b", 0, ALLOC)]);
    assert_eq!(h.decide(now), vec![]);
}

#[test]
fn hysteresis_applies_where_the_paths_part_in_the_tree() {
    use super::support::acc;
    // org g (share 1) holds a and b; org h (share 1) holds c. a's waiter vs c's job: the
    // comparison is between g and h, whose usage includes b's.
    let mut h = H::new();
    // The window rule alone: these allocations hold no more than their share floor.
    h.state.set_share_floor(false);
    h.tree(vec![
        acc("g", 1, vec![leaf("a", 1), leaf("b", 1)]),
        acc("h", 1, vec![leaf("c", 1)]),
    ]);
    h.node("n1", 8);
    h.running(0, "x", "h/c", 3600, &[("n1", 8)]);
    h.submit(0, "w", "g/a", 8, 3600);
    let now = 5 * HOUR;
    // g: a 0 + b 5 GPU-h, + 8 charged = 13 GPU-h over 2,000 allocated; h: c over 2,000.
    let rows = |c: u64| {
        [
            ("g/a", 0, ALLOC),
            ("g/b", gpu_h(5.0), ALLOC),
            ("h/c", c, 2 * ALLOC),
        ]
    };
    h.snapshot(now, &rows(gpu_h(14.0)));
    // 14 < 13 x 1.1 = 14.3: not enough.
    assert_eq!(h.decide(now), vec![]);
    h.snapshot(now, &rows(gpu_h(14.3)));
    assert_eq!(victims(&h.decide(now)), vec!["x"]);
}

#[test]
fn grace_timeout_kills_and_requeues_resumable_jobs() {
    for resumable in [true, false] {
        let mut h = H::new();
        h.two_teams();
        h.node("n1", 8);
        h.running_full(0, "u", "b", 0, &[("n1", 8)], resumable);
        h.submit(0, "w", "a", 8, 3600);
        let now = HOUR;
        assert_eq!(
            render(&h.step(now)),
            vec![format!("order u for \"w\" by {}", now + 30 * SEC)]
        );
        // During the grace period nothing more is ordered, nobody is killed.
        assert_eq!(h.decide(now + 30 * SEC - 1), vec![]);
        assert_eq!(next_due(&h.state, now, &h.cfg), Some(now + 30 * SEC));
        let out = h.step(now + 30 * SEC);
        if resumable {
            assert_eq!(render(&out), vec!["preempted u killed=true", "requeued u"]);
            assert!(h.state.decision().job("u").is_some());
        } else {
            assert_eq!(render(&out), vec!["preempted u killed=true"]);
            assert!(h.state.decision().job("u").is_none(), "it ended");
        }
        // The waiter now fits the free node; the decision service places it.
        let d = fairshare_decision::domain::decide(h.state.decision(), now + 30 * SEC);
        assert_eq!(d.placements[0].job_id, "w");
        assert_eq!(h.decide(now + 31 * SEC), vec![]);
    }
}

#[test]
fn a_confirmation_before_the_deadline_ends_it_as_preempted() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "u", "b", 0, &[("n1", 8)]);
    h.submit(0, "w", "a", 8, 3600);
    h.step(HOUR);
    h.confirm(HOUR + 10 * SEC, "u");
    assert_eq!(render(&h.step(HOUR + 10 * SEC)), vec!["requeued u"]);
    // No kill at the deadline: it is no longer running.
    assert_eq!(h.decide(HOUR + 30 * SEC), vec![]);
    assert!(h.state.orders().is_empty());
}

#[test]
fn a_requeued_job_keeps_its_place_in_its_allocation() {
    let mut h = H::new();
    // The window rule alone: these allocations hold no more than their share floor.
    h.state.set_share_floor(false);
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "v", "b", 3600, &[("n1", 8)]);
    h.submit(10 * MIN, "q", "b", 8, 3600);
    h.submit(20 * MIN, "w", "a", 8, 3600);
    let now = 2 * HOUR;
    usage(&mut h, now, gpu_h(100.0));
    assert_eq!(orders(&h.step(now)), vec![("v".into(), "w".into())]);
    h.confirm(now + 5 * SEC, "v");
    assert_eq!(render(&h.step(now + 5 * SEC)), vec!["requeued v"]);
    let queue: Vec<String> = h.state.decision().queues()["b"]
        .allocated
        .keys()
        .map(|k| k.job_id.to_string())
        .collect();
    // v was submitted before q and is back ahead of it.
    assert_eq!(queue, vec!["v", "q"]);
    assert_eq!(h.state.decision().job("v").unwrap().submitted_ms, 0);
}

#[test]
fn a_cordoned_node_drains_without_violating_any_minimum_runtime() {
    let mut h = H::new();
    // The wake-ups asserted below are the protection ends (with the hourly floor, each hour's
    // end would come first while x waits).
    h.state.set_hourly_floor(false);
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "u", "b", 0, &[("n1", 2)]);
    h.running(0, "x", "b", 3600, &[("n1", 2)]);
    h.running_full(30 * MIN, "y", "a", 2 * 3600, &[("n1", 4)], false);
    h.cordon(10 * MIN, "n1");
    // Unallocated work goes at once; the rest waits for its minimum runtime.
    assert_eq!(victims(&h.step(10 * MIN)), vec!["u"]);
    h.confirm(10 * MIN + 20 * SEC, "u");
    assert_eq!(render(&h.step(10 * MIN + 20 * SEC)), vec!["requeued u"]);
    assert_eq!(next_due(&h.state, 10 * MIN + 20 * SEC, &h.cfg), Some(HOUR));
    assert_eq!(h.decide(HOUR - 1), vec![]);
    assert_eq!(victims(&h.step(HOUR)), vec!["x"]);
    h.confirm(HOUR + 10 * SEC, "x");
    // x is requeued; it waits (the only node is cordoned) and preempts nobody.
    assert_eq!(render(&h.step(HOUR + 10 * SEC)), vec!["requeued x"]);
    let y_end = 30 * MIN + 2 * HOUR;
    assert_eq!(next_due(&h.state, HOUR + 10 * SEC, &h.cfg), Some(y_end));
    assert_eq!(h.decide(y_end - 1), vec![]);
    assert_eq!(victims(&h.step(y_end)), vec!["y"]);
    // Killed at the deadline, not resumable: it ends, and the node is empty.
    assert_eq!(
        render(&h.step(y_end + 30 * SEC)),
        vec!["preempted y killed=true"]
    );
    assert_eq!(render(&h.step(y_end + 30 * SEC)), vec!["drained n1"]);
    assert!(h.state.decision().load("n1").is_none());
    // Reported once.
    assert_eq!(h.decide(y_end + HOUR), vec![]);
}

#[test]
fn uncordon_stops_the_drain() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "x", "b", 3600, &[("n1", 8)]);
    h.cordon(0, "n1");
    assert_eq!(h.decide(30 * MIN), vec![]);
    h.uncordon(30 * MIN, "n1");
    assert_eq!(h.decide(HOUR), vec![]);
    assert_eq!(h.decide(10 * HOUR), vec![]);
}

#[test]
fn an_empty_cordoned_node_is_reported_drained_once_per_cordon() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.cordon(0, "n1");
    assert_eq!(render(&h.step(MIN)), vec!["drained n1"]);
    assert_eq!(h.decide(2 * MIN), vec![]);
    h.uncordon(3 * MIN, "n1");
    h.cordon(4 * MIN, "n1");
    assert_eq!(render(&h.decide(5 * MIN)), vec!["drained n1"]);
}

#[test]
fn a_job_landing_on_a_node_reported_drained_is_drained_and_the_node_reported_again() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.cordon(0, "n1");
    assert_eq!(render(&h.step(MIN)), vec!["drained n1"]);
    // A placement decided before the cordon lands after the report: the node is busy again.
    h.running(2 * MIN, "late", "b", 0, &[("n1", 2)]);
    assert_eq!(victims(&h.step(2 * MIN)), vec!["late"]);
    h.confirm(2 * MIN + 10 * SEC, "late");
    assert_eq!(
        render(&h.step(2 * MIN + 10 * SEC)),
        vec!["requeued late", "drained n1"]
    );
    assert_eq!(h.decide(HOUR), vec![]);
}

/// A placement decided before the cordon lands just before a drained report decided without
/// it: the report does not count, and the node is reported once the job has left.
#[test]
fn a_drained_report_that_missed_a_placement_does_not_count() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.cordon(0, "n1");
    let report = h.decide(MIN);
    assert_eq!(render(&report), vec!["drained n1"]);
    // Folded in this order: the late placement, then the report decided before it.
    h.running(MIN, "late", "b", 0, &[("n1", 2)]);
    h.ok(MIN, report[0].clone());
    assert_eq!(victims(&h.step(MIN)), vec!["late"]);
    h.confirm(MIN + 10 * SEC, "late");
    assert_eq!(
        render(&h.step(MIN + 10 * SEC)),
        vec!["requeued late", "drained n1"]
    );
}

#[test]
fn maintenance_at_t_is_respected() {
    let t = 3 * HOUR;
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.node("n2", 8);
    h.running(0, "x", "b", 3600, &[("n1", 4)]);
    h.maintenance(10 * MIN, &["n1"], t, t + HOUR);
    // The decision service places only work whose protection ends by T on n1: a 1 h job goes
    // to n1 (best fit), a 4 h job to n2.
    h.submit(HOUR, "short", "a", 4, 3600);
    h.submit(HOUR, "long", "a", 4, 4 * 3600);
    assert_eq!(
        h.placements(HOUR),
        vec![
            ("long".to_string(), "n2".to_string()),
            ("short".to_string(), "n1".to_string())
        ]
    );
    h.place(HOUR, "short", &[("n1", 4)]);
    h.start(HOUR, "short");
    h.place(HOUR, "long", &[("n2", 4)]);
    h.start(HOUR, "long");
    // What still runs on n1 is ordered off grace before T, so it is gone by T.
    // Nothing waits, so the next thing due is the window (not a protection end).
    assert_eq!(next_due(&h.state, HOUR, &h.cfg), Some(t - 30 * SEC));
    assert_eq!(h.decide(t - 30 * SEC - 1), vec![]);
    let out = h.decide(t - 30 * SEC);
    assert_eq!(
        render(&out),
        vec![
            format!("order short for \"\" by {t}"),
            format!("order x for \"\" by {t}"),
        ]
    );
    let Body::PreemptionOrdered(p) = &out[0] else {
        unreachable!()
    };
    assert!(p.reason.starts_with("maintenance"), "{}", p.reason);
    assert!(!p.reason.contains("minimum runtime"), "{}", p.reason);
    assert!(
        causes(&out)
            .iter()
            .all(|(_, c)| *c == PreemptionCause::Maintenance)
    );
}

#[test]
fn a_window_brings_an_earlier_orders_deadline_forward() {
    let t0 = HOUR;
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "x", "b", 60, &[("n1", 4)]);
    // x is ordered off for fair share with the usual 30 s grace...
    h.ok(
        t0,
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "x".into(),
            for_job_id: "w".into(),
            grace_deadline_ms: t0 + 30 * SEC,
            ..Default::default()
        }),
    );
    // ...then a window on n1 is scheduled to start before that deadline.
    let start = t0 + 20 * SEC;
    h.maintenance(t0 + 5 * SEC, &["n1"], start, start + HOUR);
    let out = h.step(t0 + 5 * SEC);
    assert_eq!(render(&out), vec![format!("order x for \"\" by {start}")]);
    // The earlier deadline is the one in force now; nothing more to order.
    assert_eq!(h.decide(t0 + 6 * SEC), vec![]);
}

#[test]
fn a_cancelled_window_clears_nothing() {
    let t = 3 * HOUR;
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "x", "b", 60, &[("n1", 4)]);
    h.maintenance(10 * MIN, &["n1"], t, t + HOUR);
    assert_eq!(next_due(&h.state, HOUR, &h.cfg), Some(t - 30 * SEC));
    h.ok(
        HOUR,
        Body::MaintenanceCancelled(pb::MaintenanceCancelled {
            cluster: CLUSTER.into(),
            nodes: vec!["n1".into()],
            start_ms: t,
            end_ms: t + HOUR,
            reason: "moved".into(),
        }),
    );
    assert_eq!(next_due(&h.state, HOUR, &h.cfg), None);
    assert_eq!(h.decide(t - 30 * SEC), vec![]);
    assert_eq!(h.decide(t + MIN), vec![]);
}

#[test]
fn a_longer_grace_waits_for_protections_that_end_before_the_window() {
    let t = 3 * HOUR;
    let mut h = H::new();
    h.cfg.grace_ms = 2 * MIN;
    h.two_teams();
    h.node("n1", 8);
    // Placed before the window was known; protected until T - 1 min, before T: the window
    // accepts it, so clearing the node 2 min (the grace) before T must wait for its end.
    h.running(t - HOUR - MIN, "p", "b", 3600, &[("n1", 4)]);
    h.running(0, "x", "b", 60, &[("n1", 4)]);
    h.maintenance(HOUR, &["n1"], t, t + HOUR);
    let out = h.step(t - 2 * MIN);
    assert_eq!(render(&out), vec![format!("order x for \"\" by {t}")]);
    assert_eq!(next_due(&h.state, t - 2 * MIN, &h.cfg), Some(t - MIN));
    let out = h.decide(t - MIN);
    // Ordered when its protection ends, to be off by T: its grace is cut to the minute left.
    assert_eq!(render(&out), vec![format!("order p for \"\" by {t}")]);
    let Body::PreemptionOrdered(p) = &out[0] else {
        unreachable!()
    };
    assert!(!p.reason.contains("minimum runtime"), "{}", p.reason);
}

#[test]
fn maintenance_scheduled_inside_a_protection_says_so() {
    let t = 3 * HOUR;
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "y", "b", 8 * 3600, &[("n1", 8)]);
    h.maintenance(HOUR, &["n1"], t, t + HOUR);
    let out = h.decide(t - 30 * SEC);
    let Some(Body::PreemptionOrdered(p)) = out.first() else {
        panic!("{out:?}")
    };
    assert_eq!(p.job_id, "y");
    assert!(
        p.reason.contains("inside the job's minimum runtime"),
        "{}",
        p.reason
    );
}

#[test]
fn multi_node_waiters_get_whole_nodes() {
    let mut h = H::new();
    // The window rule alone: these allocations hold no more than their share floor.
    h.state.set_share_floor(false);
    h.two_teams();
    for n in ["n1", "n2", "n3"] {
        h.node(n, 8);
    }
    h.running(0, "u", "b", 0, &[("n1", 8)]);
    h.running(0, "x", "b", 1800, &[("n2", 8)]);
    h.running(0, "p", "b", 8 * 3600, &[("n3", 8)]);
    h.submit_full(0, "w", "a", 2, 8, 3600, 0, true);
    let now = 2 * HOUR + 10 * MIN;
    usage(&mut h, now, gpu_h(100.0));
    let plan = select_victims(&h.state, "w", now, &h.cfg).unwrap();
    assert_eq!(plan.nodes, vec!["n1", "n2"]);
    assert_eq!(plan.lost_gpu_ms, 2 * 8 * 10 * MIN as u128);
    assert_eq!(
        causes(&h.decide(now)),
        [
            ("u".to_owned(), PreemptionCause::Unallocated),
            ("x".to_owned(), PreemptionCause::Window)
        ]
    );
}

#[test]
fn a_multi_node_victim_is_paid_for_once() {
    let mut h = H::new();
    // The window rule alone: these allocations hold no more than their share floor.
    h.state.set_share_floor(false);
    h.two_teams();
    for n in ["n1", "n2", "n3"] {
        h.node(n, 8);
    }
    // m spans n1 and n2 (16 GPUs, 10 min past a checkpoint: 160 GPU-min); s alone holds n3
    // (8 GPUs, 25 min: 200 GPU-min). Counted per node m would look dearer (160 twice).
    h.running(0, "m", "b", 1800, &[("n1", 8), ("n2", 8)]);
    h.running(HOUR + 45 * MIN, "s", "b", 0, &[("n3", 8)]);
    h.submit_full(0, "w", "a", 2, 8, 3600, 0, true);
    let now = 2 * HOUR + 10 * MIN;
    usage(&mut h, now, gpu_h(100.0));
    let plan = select_victims(&h.state, "w", now, &h.cfg).unwrap();
    assert_eq!(plan.nodes, vec!["n1", "n2"]);
    assert_eq!(plan.victims.len(), 1);
    assert_eq!(plan.lost_gpu_ms, 16 * 10 * MIN as u128);
}

#[test]
fn debug_waiters_are_reported_and_orders_carry_their_basis() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "u", "b", 0, &[("n1", 8)]);
    h.submit(0, "dbg", "a", 1, 600);
    let now = HOUR;
    let mut out = h.decide(now);
    let Some(Body::PreemptionOrdered(p)) = out.first() else {
        panic!("{out:?}")
    };
    assert!(p.reason.contains("debug job dbg"), "{}", p.reason);
    // A debug job taking unallocated work: the victim's kind decides the cause.
    assert_eq!(p.cause(), PreemptionCause::Unallocated);
    let basis = p.basis.unwrap();
    assert_eq!(
        (basis.through_sequence, basis.computed_at_ms, basis.cycle),
        (h.seq(), now, 0)
    );
    stamp_cycle(&mut out, 42);
    let Some(Body::PreemptionOrdered(p)) = out.first() else {
        unreachable!()
    };
    assert_eq!(p.basis.unwrap().cycle, 42);
}

#[test]
fn a_waiter_that_cannot_be_helped_holds_the_line() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 1)]);
    h.node("n1", 8);
    h.node("n2", 8);
    h.running(0, "p", "b", 8 * 3600, &[("n1", 8)]);
    h.running(0, "u", "b", 0, &[("n2", 8)]);
    // a ranks first and needs two whole nodes; n1 is protected. c's 1-GPU job could take u's
    // GPUs, but they are what a waits for (20 min: too long for a debug job, which would go
    // first under its allowance).
    h.submit_full(0, "big", "a", 2, 8, 3600, 0, true);
    h.submit(0, "small", "c", 1, 1200);
    let now = HOUR;
    abc_usage(&mut h, now);
    assert_eq!(h.decide(now), vec![]);
    assert!(matches!(
        fair_share(&h.state, now, &h.cfg),
        FairShare::Blocked(line) if line.first.job_id == "big"
    ));
}

/// Allocations a, b and c (a third each) on `nodes`, 8 GPUs each.
fn abc_on(nodes: &[&str]) -> H {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 1)]);
    for n in nodes {
        h.node(n, 8);
    }
    h
}

/// A usage snapshot at `at` for allocations a, b and c: a has used nothing, b 50 GPU-h, c 1
/// GPU-h, so a ranks first, then c, then b.
fn abc_usage(h: &mut H, at: i64) {
    h.snapshot(
        at,
        &[
            ("a", 0, ALLOC),
            ("b", gpu_h(50.0), ALLOC),
            ("c", gpu_h(1.0), ALLOC),
        ],
    );
}

/// Three nodes under b's work: n1 protected for 10 h; n2 protected 4 GPUs (until 1 h) beside
/// 4 unallocated; n3 protected 2 GPUs (20 h) beside 6 GPUs of `n3_job` (unallocated, or b's
/// work past its minimum runtime). a's 8-GPU job fits nowhere even with every preemptible job
/// gone, and its reservation takes n2 (free earliest, at 1 h). c's 4-GPU job waits behind it.
fn blocked_line(n3_min_runtime_s: i64) -> (H, i64) {
    blocked_line_of(Line {
        n3_min_runtime_s,
        ..Line::default()
    })
}

/// How a test's blocked line differs from [`blocked_line`]'s.
struct Line {
    /// a's, b's and c's shares.
    shares: [u64; 3],
    /// The minimum runtime of u2 beside p2 on n2 (0: unallocated work).
    u2_min_runtime_s: i64,
    /// The minimum runtime of j3 on n3 (0: unallocated work).
    n3_min_runtime_s: i64,
    /// A fourth node where c runs 8 GPUs: c1 (4, protected for 2 h) and c2 (4, past its
    /// minimum runtime), so a's job cannot have that node either.
    c_on_n4: bool,
    /// 8-GPU jobs of a fourth allocation d (share 1, ranked between a and c), queued after a's
    /// job and before c's (none: no d in the tree).
    d_jobs: usize,
    /// After those, a 2-GPU job of d (its id sorts after theirs).
    d_small: bool,
    /// GPUs of j3 on n3 (the rest of n3 beside p3 is free).
    j3_gpus: u32,
    /// GPUs of c's job.
    small_gpus: u32,
    /// Minimum runtime of c's job.
    small_min_runtime_s: i64,
}

impl Default for Line {
    fn default() -> Self {
        Line {
            shares: [1, 1, 1],
            u2_min_runtime_s: 0,
            n3_min_runtime_s: 0,
            c_on_n4: false,
            d_jobs: 0,
            d_small: false,
            j3_gpus: 6,
            small_gpus: 4,
            small_min_runtime_s: 1200,
        }
    }
}

fn blocked_line_of(line: Line) -> (H, i64) {
    let mut h = H::new();
    let [a, b, c] = line.shares;
    let mut accounts = vec![leaf("a", a), leaf("b", b), leaf("c", c)];
    if line.d_jobs > 0 {
        accounts.push(leaf("d", 1));
    }
    h.tree(accounts);
    let nodes: &[&str] = if line.c_on_n4 {
        &["n1", "n2", "n3", "n4"]
    } else {
        &["n1", "n2", "n3"]
    };
    for n in nodes {
        h.node(n, 8);
    }
    h.running(0, "p1", "b", 10 * 3600, &[("n1", 8)]);
    h.running(0, "p2", "b", 3600, &[("n2", 4)]);
    h.running(0, "u2", "b", line.u2_min_runtime_s, &[("n2", 4)]);
    h.running(0, "p3", "b", 20 * 3600, &[("n3", 2)]);
    h.running(0, "j3", "b", line.n3_min_runtime_s, &[("n3", line.j3_gpus)]);
    if line.c_on_n4 {
        h.running(0, "c1", "c", 2 * 3600, &[("n4", 4)]);
        h.running(0, "c2", "c", 60, &[("n4", 4)]);
    }
    h.submit(0, "big", "a", 8, 3600);
    for i in 0..line.d_jobs {
        h.submit(0, &format!("d{i}"), "d", 8, 3600);
    }
    if line.d_small {
        h.submit(0, &format!("d{}", line.d_jobs), "d", 2, 3600);
    }
    h.submit(0, "small", "c", line.small_gpus, line.small_min_runtime_s);
    let now = 30 * MIN;
    let mut usage = vec![
        ("a", 0, ALLOC),
        ("b", gpu_h(50.0), ALLOC),
        ("c", gpu_h(1.0), ALLOC),
    ];
    if line.d_jobs > 0 {
        usage.push(("d", gpu_h(0.5), ALLOC));
    }
    h.snapshot(now, &usage);
    (h, now)
}

#[test]
fn behind_a_blocked_waiter_unallocated_work_off_its_reserved_nodes_makes_room() {
    let (mut h, now) = blocked_line(0);
    // u2 would be the cheaper victim for c (4 GPUs of lost work against 6), but n2 is what a's
    // reservation holds: the 6 unallocated GPUs on n3 go instead.
    match fair_share(&h.state, now, &h.cfg) {
        FairShare::Preempt(plan) => {
            assert_eq!(plan.waiter.job_id, "small");
            assert_eq!(plan.nodes, vec!["n3"]);
            assert_eq!(
                plan.victims.iter().map(|v| v.job_id).collect::<Vec<_>>(),
                vec!["j3"]
            );
        }
        other => panic!("expected victims for the job behind, got {other:?}"),
    }
    assert_eq!(
        render(&h.decide(now)),
        vec![format!("order j3 for \"small\" by {}", now + 30 * SEC)]
    );
    // Once that order is folded, c fits and nothing more is taken for it; a still waits.
    h.step(now);
    assert!(matches!(
        fair_share(&h.state, now, &h.cfg),
        FairShare::Blocked(line) if line.first.job_id == "big"
    ));
}

#[test]
fn behind_a_blocked_waiter_allocated_work_is_not_taken_without_the_share_floor() {
    // The same line with b's 6 GPUs on n3 allocated and past its minimum runtime: c ranks far
    // above b, so c could take them if it were first in line, but not behind a's job.
    let (mut h, now) = blocked_line(60);
    h.state.set_share_floor(false);
    assert_eq!(h.decide(now), vec![]);
    assert!(matches!(
        fair_share(&h.state, now, &h.cfg),
        FairShare::Blocked(line) if line.first.job_id == "big"
    ));
}

#[test]
fn behind_a_blocked_waiter_an_allocation_below_its_floor_takes_allocated_work_off_the_reserved_nodes()
 {
    // The same line with the share floor on: c holds nothing of its 8-GPU floor, b holds 20
    // GPUs of allocated work, so c's job may have b's work past its minimum runtime ordered
    // off, behind a's blocked job too. Not u2 on n2, the cheaper victim (no lost work either,
    // and unallocated, which goes first on ties): n2 is a's reservation.
    let (mut h, now) = blocked_line(60);
    let out = h.decide(now);
    assert_eq!(orders(&out), vec![("j3".into(), "small".into())]);
    assert_eq!(
        causes(&out),
        vec![("j3".into(), PreemptionCause::ShareFloor)]
    );
    // Once it is folded, c fits and nothing more goes for it; a still waits.
    h.step(now);
    assert!(matches!(
        fair_share(&h.state, now, &h.cfg),
        FairShare::Blocked(line) if line.first.job_id == "big"
    ));
}

#[test]
fn behind_a_blocked_waiter_in_a_full_cluster_an_allocation_below_its_floor_is_still_helped() {
    // No free GPU and no unallocated work anywhere (u2 on n2 is b's allocated work, protected
    // for an hour like p2): nothing helps a job behind a's but allocated work, which c, below
    // its floor, may take. The walk goes on behind a's job rather than stopping there.
    let (h, now) = blocked_line_of(Line {
        u2_min_runtime_s: 3600,
        n3_min_runtime_s: 60,
        ..Line::default()
    });
    assert_eq!(orders(&h.decide(now)), vec![("j3".into(), "small".into())]);
}

#[test]
fn behind_a_blocked_waiter_the_cheaper_of_the_rank_rules_plan_and_unallocated_work_goes() {
    // a's 8-GPU job is blocked (every node keeps protected work); c, below its floor, waits
    // behind it for 3 GPUs, off n1 (a's reservation). On n2 the rank rule's cheapest cover is
    // b's v (3 GPUs, started 190 s ago, no checkpoint yet: 9.5 GPU-min), which breaks the
    // 3-minute average limit of a waiter behind a blocked one, so the rank rule passes over n2
    // and settles on b's w on n3 (7 GPUs, started 2 min ago: 14 GPU-min). Unallocated work
    // alone does cheaper: u on n2 (4 GPUs, started 2.5 min ago: 10 GPU-min, within the limit
    // of 3 minutes per GPU that unallocated work behind a blocked waiter is held to too).
    let mut h = abc_on(&["n1", "n2", "n3"]);
    let now = HOUR;
    h.running(0, "p1", "b", 2 * 3600, &[("n1", 8)]);
    h.running(0, "q2", "b", 20 * 3600, &[("n2", 1)]);
    h.running(now - 5 * MIN / 2, "u", "b", 0, &[("n2", 4)]);
    h.running(now - 190 * SEC, "v", "b", 60, &[("n2", 3)]);
    h.running(0, "r3", "b", 20 * 3600, &[("n3", 1)]);
    h.running(now - 2 * MIN, "w", "b", 60, &[("n3", 7)]);
    h.submit(0, "big", "a", 8, 3600);
    h.submit(0, "small", "c", 3, 1200);
    abc_usage(&mut h, now);
    assert_eq!(orders(&h.decide(now)), vec![("u".into(), "small".into())]);
}

#[test]
fn behind_a_blocked_waiter_floor_orders_wait_for_victims_that_checkpointed_lately() {
    // The line with b's 6 GPUs on n3 allocated and past their minimum runtime, 5 minutes after
    // the checkpoint they made at 30 min. With the limit of a waiter first in line (10 minutes
    // per GPU for c, which holds none of its floor) they would go for c now; behind a's
    // blocked job the limit is 3 minutes, and c waits for their next checkpoint, when the
    // pass comes back.
    let (h, now) = blocked_line(60);
    let later = now + 5 * MIN;
    let (out, retry) = decide_preemptions_and_retry(&h.state, later, &h.cfg);
    assert_eq!(orders(&out), vec![]);
    assert_eq!(retry, Some(HOUR));
}

#[test]
fn behind_a_blocked_waiter_unallocated_work_goes_once_it_checkpointed_lately() {
    // The line as it is (j3's 6 GPUs on n3 unallocated, started at 0), 5 minutes after their
    // checkpoint at 30 min. A waiter first in line takes unallocated work at once; behind a's
    // blocked job c waits for their next checkpoint (at most 3 minutes per GPU thrown away),
    // when the pass comes back. 2 minutes after the checkpoint at 30 min they go. c is below
    // its floor, so this holds for both of its plans: unallocated work alone and the rank
    // rule's.
    let (h, now) = blocked_line(0);
    let (out, retry) = decide_preemptions_and_retry(&h.state, now + 5 * MIN, &h.cfg);
    assert_eq!(orders(&out), vec![]);
    assert_eq!(retry, Some(HOUR));
    let (out, _) = decide_preemptions_and_retry(&h.state, now + 2 * MIN, &h.cfg);
    assert_eq!(orders(&out), vec![("j3".into(), "small".into())]);
}

#[test]
fn behind_a_blocked_waiter_a_node_short_even_without_its_unallocated_work_notes_no_retry() {
    // a's 8-GPU job is blocked (b's protected work on every node; its reservation takes n2).
    // c, below its floor, waits behind it for 4 GPUs. At 44 min, n3 (1 free, j3's 2 GPUs of
    // unallocated work, next checkpoint at 45 min) is short even with j3 gone, so the search
    // passes over n3 without judging j3; n4's k4 (6 GPUs, next checkpoint at 60 min) is held
    // back for its lost work. The pass comes back at 60 min, not 45: a debug build, which
    // judges n3 anyway to check that bound, must decide as a release build does.
    let mut h = abc_on(&["n1", "n2", "n3", "n4"]);
    h.running(0, "p1", "b", 10 * 3600, &[("n1", 8)]);
    h.running(0, "p2", "b", 3600, &[("n2", 4)]);
    h.running(0, "u2", "b", 0, &[("n2", 4)]);
    h.running(0, "p3", "b", 20 * 3600, &[("n3", 5)]);
    h.running(15 * MIN, "j3", "b", 0, &[("n3", 2)]);
    h.running(0, "p4", "b", 20 * 3600, &[("n4", 2)]);
    h.running(0, "k4", "b", 0, &[("n4", 6)]);
    h.submit(15 * MIN, "big", "a", 8, 3600);
    h.submit(15 * MIN, "small", "c", 4, 1200);
    let now = 44 * MIN;
    abc_usage(&mut h, now);
    let (out, retry) = decide_preemptions_and_retry(&h.state, now, &h.cfg);
    assert_eq!(orders(&out), vec![]);
    assert_eq!(retry, Some(HOUR));
}

#[test]
fn behind_a_blocked_waiter_a_job_like_an_unhelped_one_is_still_searched_for_with_its_own_claim() {
    // a's 8-GPU job is blocked (its reservation takes n2). Behind it c, below its floor, queues
    // x1 and x2, alike (4 GPUs, 20 minutes). On n3, b's v (2 GPUs) is already leaving for x2,
    // and j3 (2 GPUs of unallocated work) runs beside protected work. Nothing makes room for
    // x1: v's GPUs are x2's. x2, though like x1, holds those 2 GPUs and needs only j3's: the
    // walk must search for it rather than pass over a job like one no victims could help.
    let mut h = abc_on(&["n1", "n2", "n3"]);
    let now = HOUR;
    h.running(0, "p1", "b", 10 * 3600, &[("n1", 8)]);
    h.running(0, "p2", "b", 2 * 3600, &[("n2", 4)]);
    h.running(0, "u2", "b", 0, &[("n2", 4)]);
    h.running(0, "p3", "b", 20 * 3600, &[("n3", 4)]);
    h.running(0, "v", "b", 60, &[("n3", 2)]);
    h.running(now - MIN, "j3", "b", 0, &[("n3", 2)]);
    h.submit(0, "big", "a", 8, 3600);
    h.submit(0, "x1", "c", 4, 1200);
    h.submit(0, "x2", "c", 4, 1200);
    abc_usage(&mut h, now - 10 * SEC);
    h.ok(
        now - 5 * SEC,
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "v".into(),
            for_job_id: "x2".into(),
            grace_deadline_ms: now + 25 * SEC,
            ..Default::default()
        }),
    );
    assert_eq!(orders(&h.decide(now)), vec![("j3".into(), "x2".into())]);
}

#[test]
fn behind_a_blocked_waiter_a_debug_job_takes_unallocated_work_at_once() {
    // c's job a debug job (2 GPUs, 10 minutes) with no debug allowance, so it is met in rank
    // order behind a's blocked job: as a debug job anywhere, it takes what it needs at once,
    // j3 5 minutes after its checkpoint too.
    let (mut h, now) = blocked_line_of(Line {
        small_gpus: 2,
        small_min_runtime_s: 600,
        ..Line::default()
    });
    h.state.set_debug_allowance_gpus(0);
    let (out, _) = decide_preemptions_and_retry(&h.state, now + 5 * MIN, &h.cfg);
    assert_eq!(orders(&out), vec![("j3".into(), "small".into())]);
}

#[test]
fn behind_a_blocked_waiter_one_allocations_many_waiters_do_not_hide_the_next() {
    // d, below its floor and ranked before c, queues ten 8-GPU jobs behind a's blocked one: no
    // victims free a whole node off a's reservation for any of them. After four of them the
    // walk passes over the rest of d's and reaches c, whose job has b's work past its minimum
    // runtime on n3 ordered off. (Counting d's ten against the eight waiters looked at behind
    // a blocked one, the walk stopped before c.)
    let (h, now) = blocked_line_of(Line {
        n3_min_runtime_s: 60,
        d_jobs: 10,
        ..Line::default()
    });
    assert_eq!(orders(&h.decide(now)), vec![("j3".into(), "small".into())]);
}

#[test]
fn behind_a_blocked_waiter_a_capped_allocations_job_that_fits_keeps_its_place() {
    // d's four 8-GPU jobs cannot be helped, but its 2-GPU job after them fits the 2 free GPUs
    // on n3, where the cycle will place it. c's 6-GPU job would fit n3 with j3 (4 GPUs) gone
    // only by counting those 2 GPUs too: the walk must not pass over d's small job, so nothing
    // is ordered off for c. (Passing over the rest of d's waiters regardless, j3 went.)
    let (h, now) = blocked_line_of(Line {
        n3_min_runtime_s: 60,
        d_jobs: 4,
        d_small: true,
        j3_gpus: 4,
        small_gpus: 6,
        ..Line::default()
    });
    assert_eq!(orders(&h.decide(now)), vec![]);
}

#[test]
fn behind_a_blocked_waiter_an_allocation_at_its_floor_takes_no_allocated_work() {
    // The same line with a fourth node where c runs 8 GPUs (4 protected for 2 h, so a's job
    // cannot have that node), and c's share a fifth (a and b two fifths each): c holds its
    // 6.4-GPU floor of 32, so behind a's job it may take unallocated work only, and none runs
    // off n2, though the window ranks b far below c.
    let (h, now) = blocked_line_of(Line {
        shares: [2, 2, 1],
        n3_min_runtime_s: 60,
        c_on_n4: true,
        ..Line::default()
    });
    assert_eq!(h.decide(now), vec![]);
    assert!(matches!(
        fair_share(&h.state, now, &h.cfg),
        FairShare::Blocked(line) if line.first.job_id == "big"
    ));
}

#[test]
fn a_waiter_no_node_can_take_does_not_block_the_others() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 1)]);
    h.node("n1", 8);
    h.node("n2", 8);
    h.cordon(0, "n2");
    h.running(0, "u", "b", 0, &[("n1", 8)]);
    // Two whole 8-GPU nodes never exist uncordoned: a's job cannot be helped by victims.
    h.submit_full(0, "big", "a", 2, 8, 3600, 0, true);
    h.submit(0, "small", "c", 1, 600);
    let now = HOUR;
    abc_usage(&mut h, now);
    assert_eq!(orders(&h.decide(now)), vec![("u".into(), "small".into())]);
}

#[test]
fn config_is_validated() {
    assert_eq!(Config::default().validate(), Ok(()));
    let bad = Config {
        checkpoint_interval_ms: 0,
        ..Config::default()
    };
    assert!(bad.validate().is_err());
    let bad = Config {
        grace_ms: -1,
        ..Config::default()
    };
    assert!(bad.validate().is_err());
}

/// Two teams on two 8-GPU nodes (floors of 8 GPUs each); `a` has used far more than `b` in
/// the window, so the window alone never lets `a` take `b`'s work.
fn floor_case() -> H {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.node("n2", 8);
    h
}

fn a_over_served(h: &mut H, now: i64) {
    h.snapshot(now, &[("a", gpu_h(500.0), ALLOC), ("b", 0, ALLOC)]);
}

fn reasons(out: &[Body]) -> Vec<String> {
    out.iter()
        .filter_map(|b| match b {
            Body::PreemptionOrdered(p) => Some(p.reason.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn below_its_floor_a_waiter_takes_work_the_window_would_keep() {
    let mut h = floor_case();
    // b holds all 16 GPUs; x1 is past its minimum runtime, x2 and x3 are protected.
    h.running(0, "x1", "b", 3600, &[("n1", 4)]);
    h.running(0, "x2", "b", 8 * 3600, &[("n1", 4)]);
    h.running(0, "x3", "b", 8 * 3600, &[("n2", 8)]);
    h.submit(MIN, "w", "a", 4, 3600);
    // 5 min after x1's last checkpoint (at 2 h).
    let now = 2 * HOUR + 5 * MIN;
    a_over_served(&mut h, now);
    let out = h.decide(now);
    assert_eq!(orders(&out), [("x1".to_owned(), "w".to_owned())]);
    assert!(
        reasons(&out)[0].contains(
            "a holds fewer GPUs than its share floor, and b is left no further below its own \
             floor than a is"
        ),
        "{:?}",
        reasons(&out)
    );
    assert_eq!(causes(&out)[0].1, PreemptionCause::ShareFloor);
    // Without the floor, the window keeps b's work.
    h.state.set_share_floor(false);
    assert!(orders(&h.decide(now)).is_empty());
}

#[test]
fn a_floor_order_waits_for_a_victim_that_checkpointed_lately() {
    let mut h = floor_case();
    h.running(0, "x1", "b", 3600, &[("n1", 4)]);
    h.running(0, "x2", "b", 8 * 3600, &[("n1", 4)]);
    h.running(0, "x3", "b", 8 * 3600, &[("n2", 8)]);
    h.submit(MIN, "w", "a", 4, 3600);
    // a holds nothing, deep below its floor: its limit is a third of the interval (10 min).
    // 11 min after x1's last checkpoint: more than a third of the 30 min interval to lose.
    let late = 2 * HOUR + 11 * MIN;
    a_over_served(&mut h, late);
    assert!(orders(&h.decide(late)).is_empty());
    // The pass names x1's next checkpoint as worth another pass, which `next_due` does not.
    let (out, retry) = decide_preemptions_and_retry(&h.state, late, &h.cfg);
    assert!(out.is_empty());
    assert_eq!(retry, Some(2 * HOUR + 30 * MIN));
    assert_ne!(next_due(&h.state, late, &h.cfg), retry);
    // After its next checkpoint (2.5 h) it goes, and no retry is named beside the order.
    let fresh = 2 * HOUR + 31 * MIN;
    a_over_served(&mut h, fresh);
    assert_eq!(
        decide_preemptions_and_retry(&h.state, fresh, &h.cfg).1,
        None
    );
    assert_eq!(victims(&h.decide(fresh)), ["x1"]);
}

#[test]
fn below_its_floor_a_waiter_takes_victims_that_lose_a_third_of_an_interval_on_average() {
    // b holds both nodes and has used far more than a, so the window lets a's 8-GPU waiter
    // take y1 and y2 (n1); a holds nothing, below its floor. y1 checkpoints on the half hour,
    // y2 (started 20 min later) ten minutes after.
    let case = |now: i64| {
        let mut h = floor_case();
        h.running(0, "y1", "b", 3600, &[("n1", 4)]);
        h.running(20 * MIN, "y2", "b", 3600, &[("n1", 4)]);
        h.running(0, "x3", "b", 8 * 3600, &[("n2", 8)]);
        h.submit(MIN, "w", "a", 8, 3600);
        h.snapshot(now, &[("a", 0, ALLOC), ("b", gpu_h(500.0), ALLOC)]);
        victims(&h.decide(now))
    };
    // a holds nothing, deep below its floor: the limit is a third of the interval (10 min).
    // 14 and 24 min since their checkpoints: 19 min per GPU on average, over 10. It waits.
    assert!(case(2 * HOUR + 14 * MIN).is_empty());
    // 2 and 12 min: 7 on average. Both go, y2 too, though alone it is past 10 min.
    assert_eq!(case(2 * HOUR + 2 * MIN), ["y1", "y2"]);
    // 10 and 20 min: 15 on average; it waits again.
    assert!(case(2 * HOUR + 10 * MIN).is_empty());
}

#[test]
fn above_half_its_floor_a_waiter_takes_victims_within_a_fifth_of_an_interval() {
    // Two teams on four 8-GPU nodes: floors of 16. a has used far more than b, so only the
    // share floor lets a's 4-GPU waiter take b's `v` (4 GPUs on n0, past its 1 h minimum
    // runtime, beside a's protected 4-GPU job). a holds `a_holds` GPUs in protected work (4 on
    // n0, and 4 or 8 more on n1 or none); b's protected work fills the rest, so b keeps at
    // least its floor once `v` goes.
    let case = |now: i64, a_holds: u32| {
        let mut h = H::new();
        h.state.set_hourly_floor(false);
        h.two_teams();
        for n in ["n0", "n1", "n2", "n3"] {
            h.node(n, 8);
        }
        h.running(0, "own0", "a", 8 * 3600, &[("n0", 4)]);
        h.running(0, "v", "b", 3600, &[("n0", 4)]);
        let on_n1 = a_holds - 4;
        if on_n1 > 0 {
            h.running(0, "own1", "a", 8 * 3600, &[("n1", on_n1)]);
        }
        if on_n1 < 8 {
            h.running(0, "x1", "b", 8 * 3600, &[("n1", 8 - on_n1)]);
        }
        h.running(0, "x2", "b", 8 * 3600, &[("n2", 8)]);
        h.running(0, "x3", "b", 8 * 3600, &[("n3", 8)]);
        h.submit(MIN, "w", "a", 4, 3600);
        a_over_served(&mut h, now);
        victims(&h.decide(now))
    };
    // 9 min past v's checkpoint (at 1 h). Holding 12 GPUs, over half its floor, a waits for
    // v's next checkpoint: a fifth of the interval (6 min) is the most it may lose.
    assert!(case(HOUR + 9 * MIN, 12).is_empty());
    assert!(case(HOUR + 7 * MIN, 12).is_empty());
    assert_eq!(case(HOUR + 6 * MIN, 12), ["v"]);
    // At half its floor or below, a is missing most of its owed time: a third (10 min).
    assert_eq!(case(HOUR + 9 * MIN, 8), ["v"]);
    assert_eq!(case(HOUR + 9 * MIN, 4), ["v"]);
    assert!(case(HOUR + 11 * MIN, 4).is_empty());
}

#[test]
fn a_node_whose_cheapest_victims_are_stale_gives_way_to_a_dearer_fresh_one() {
    // a (below its floor, holding nothing) waits for 1 GPU. On n1 the cheapest victim is
    // y1 (1 GPU, 20 min past its checkpoint: 20 GPU-min); on n2, y2 (4 GPUs, 6 min past:
    // 24 GPU-min). n1's set breaks the 10-minute average; n2's keeps it, and is taken.
    let mut h = floor_case();
    h.running(0, "y1", "b", 3600, &[("n1", 1)]);
    h.running(0, "x1", "b", 8 * 3600, &[("n1", 7)]);
    h.running(14 * MIN, "y2", "b", 3600, &[("n2", 4)]);
    h.running(0, "x2", "b", 8 * 3600, &[("n2", 4)]);
    h.submit(MIN, "w", "a", 1, 3600);
    let now = 2 * HOUR + 20 * MIN;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", gpu_h(500.0), ALLOC)]);
    assert_eq!(victims(&h.decide(now)), ["y2"]);
}

#[test]
fn a_victim_whose_allocation_stays_at_its_floor_is_preferred_to_a_cheaper_one() {
    // Three teams on three 8-GPU nodes (floors of 8). a holds nothing and waits for 8 GPUs;
    // b holds exactly its floor (vb on n1, 1 min past its checkpoint); c holds 16 (vc on n2,
    // 5 min past; n3 protected). vb loses less, but leaves b below its floor, whose own
    // waiters would then take from someone else: vc goes.
    let case = |with_c: bool| {
        let mut h = H::new();
        h.tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 1)]);
        for n in ["n1", "n2", "n3"] {
            h.node(n, 8);
        }
        h.running(0, "vb", "b", 3600, &[("n1", 8)]);
        if with_c {
            h.running(26 * MIN, "vc", "c", 3600, &[("n2", 8)]);
        } else {
            h.running(26 * MIN, "vc", "b", 3600, &[("n2", 8)]);
        }
        h.running(0, "xc", "c", 8 * 3600, &[("n3", 8)]);
        h.submit(MIN, "w", "a", 8, 3600);
        let now = 2 * HOUR + MIN;
        h.snapshot(
            now,
            &[
                ("a", 0, ALLOC),
                ("b", gpu_h(100.0), ALLOC),
                ("c", gpu_h(100.0), ALLOC),
            ],
        );
        victims(&h.decide(now))
    };
    assert_eq!(case(true), ["vc"]);
    // With both b's (it holds 16), neither leaves it below its floor: the cheaper goes.
    assert_eq!(case(false), ["vb"]);
}

#[test]
fn at_its_floor_a_waiter_takes_a_victim_within_a_third_of_a_checkpoint_interval() {
    // Three teams on three 8-GPU nodes: floors of 8. n1 is held by a (its floor), or by c if
    // `below` (then a holds nothing); b holds 16. b has used far more than a, so the window
    // lets a take b's `v`, past its 1 h minimum runtime and checkpointing every 30 min.
    let case = |now: i64, below: bool, victim_min_runtime_s: i64| {
        let mut h = H::new();
        h.tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 1)]);
        for n in ["n1", "n2", "n3"] {
            h.node(n, 8);
        }
        let holder = if below { "c" } else { "a" };
        h.running(0, "own", holder, 8 * 3600, &[("n1", 8)]);
        h.running(0, "v", "b", victim_min_runtime_s, &[("n2", 8)]);
        h.running(0, "x", "b", 8 * 3600, &[("n3", 8)]);
        h.submit(MIN, "w", "a", 8, 3600);
        h.snapshot(
            now,
            &[("a", 0, ALLOC), ("b", gpu_h(100.0), ALLOC), ("c", 0, ALLOC)],
        );
        victims(&h.decide(now))
    };
    // Its last checkpoint 10 min ago: a third of the interval, the most it may lose.
    assert_eq!(case(HOUR + 10 * MIN, false, 3600), ["v"]);
    // 11 min ago: it waits for the next checkpoint, and goes just after it.
    assert!(case(HOUR + 11 * MIN, false, 3600).is_empty());
    assert!(case(HOUR + 29 * MIN, false, 3600).is_empty());
    assert_eq!(case(HOUR + 30 * MIN, false, 3600), ["v"]);
    // Below its floor, holding none of it, a takes the same (the floor's limit deep below it).
    assert_eq!(case(HOUR + 10 * MIN, true, 3600), ["v"]);
    assert!(case(HOUR + 11 * MIN, true, 3600).is_empty());
    // Unallocated work goes whenever it is asked to.
    assert_eq!(case(HOUR + 16 * MIN, false, 0), ["v"]);
}

#[test]
fn at_its_floor_a_multi_node_waiter_takes_victims_within_a_third_of_an_interval_on_average() {
    // Three teams on six 8-GPU nodes: floors of 16. a holds n1 and n2 (its floor), c holds
    // the other four (16 over its floor), b nothing. c has used far more than a, so the window
    // lets a's two-node job take c's `v1` (n3) and `v2` (n4), past their 1 h minimum runtime
    // and checkpointing every 30 min; c's work on n5 and n6 is protected.
    let case = |now: i64, v2_start: i64| {
        let mut h = H::new();
        h.state.set_hourly_floor(false);
        h.tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 1)]);
        for n in ["n1", "n2", "n3", "n4", "n5", "n6"] {
            h.node(n, 8);
        }
        h.running(0, "own1", "a", 8 * 3600, &[("n1", 8)]);
        h.running(0, "own2", "a", 8 * 3600, &[("n2", 8)]);
        h.running(0, "v1", "c", 3600, &[("n3", 8)]);
        h.running(v2_start, "v2", "c", 3600, &[("n4", 8)]);
        h.running(0, "x1", "c", 8 * 3600, &[("n5", 8)]);
        h.running(0, "x2", "c", 8 * 3600, &[("n6", 8)]);
        h.submit_full(MIN, "w", "a", 2, 8, 3600, 0, true);
        h.snapshot(
            now,
            &[("a", 0, ALLOC), ("b", 0, ALLOC), ("c", gpu_h(100.0), ALLOC)],
        );
        victims(&h.decide(now))
    };
    // Both 10 min past their checkpoints: a third of the interval per GPU, the most it may
    // lose.
    assert_eq!(case(HOUR + 10 * MIN, 0), ["v1", "v2"]);
    // Both 11 min past: the waiter at its floor loses no owed time by waiting.
    assert!(case(HOUR + 11 * MIN, 0).is_empty());
    // 15 and 5 min past (v2 started 10 min later, its minimum runtime over too): 10 on
    // average, so they go together, though v1 alone is over the limit.
    assert_eq!(case(HOUR + 45 * MIN, 10 * MIN), ["v1", "v2"]);
    // 25 and 10 min past: 17.5 on average, over, though v2 alone is within the limit.
    assert!(case(HOUR + 55 * MIN, 15 * MIN).is_empty());
}

#[test]
fn a_floor_order_leaves_the_victims_allocation_better_off_than_the_waiters() {
    // One 8-GPU node: floors of 4 each. a holds nothing (4 below its floor); b holds all 8 in
    // 2-GPU jobs past their minimum runtime. The plain floors: with the hourly floor, a's
    // hour so far without GPUs would raise its floor (see `an_hour_behind_...` below).
    let case = |need: u32| {
        let mut h = H::new();
        h.state.set_hourly_floor(false);
        h.two_teams();
        h.node("n1", 8);
        for i in 0..4 {
            h.running(0, &format!("x{i}"), "b", 3600, &[("n1", 2)]);
        }
        h.submit(MIN, "w", "a", need, 3600);
        let now = 2 * HOUR + 5 * MIN;
        a_over_served(&mut h, now);
        victims(&h.decide(now)).len()
    };
    // 6 GPUs leave b 2 below its floor: better off than a (4 below) by more than the 10%
    // margin of a's floor (0.4 GPU).
    assert_eq!(case(6), 3);
    // 8 GPUs would leave b 4 below: no better off than a was. The window decides, and it
    // ranks a last.
    assert_eq!(case(8), 0);
}

#[test]
fn an_hour_behind_its_share_lets_a_waiter_take_what_the_plain_floor_would_not() {
    // Two 8-GPU nodes, floors of 8 each. b has held both since before the hour, in two jobs
    // past their minimum runtime that checkpointed 10 min into it; a has waited for both
    // nodes at once (one 16-GPU job) since the hour began, and has used more than b in the
    // window.
    let case = |hourly: bool, into_hour: i64| {
        let mut h = H::new();
        h.state.set_hourly_floor(hourly);
        h.two_teams();
        h.node("n1", 8);
        h.node("n2", 8);
        let t = 10 * HOUR;
        h.running(t - 50 * MIN, "x1", "b", 600, &[("n1", 8)]);
        h.running(t - 50 * MIN, "x2", "b", 600, &[("n2", 8)]);
        h.submit_full(t, "w", "a", 2, 8, 3600, 0, true);
        a_over_served(&mut h, t + into_hour);
        victims(&h.decide(t + into_hour))
    };
    // Plain floors, 15 min in: a is 8 below its floor and the window ranks it after b, so b
    // must end less than 8 - 10% x 8 = 7.2 below its floor of 8: it keeps a GPU, so no node
    // can be freed whole, let alone two.
    assert!(case(false, 15 * MIN).is_empty());
    // Hourly, 5 min in: a is 40 GPU-min behind, under a GPU over the 55 min left: the floors
    // have not moved.
    assert!(case(true, 5 * MIN).is_empty());
    // Hourly, 15 min in: 120 GPU-min behind over the 45 min left raises a's floor to 10, and
    // b, as far ahead, gives up as much (6). b may now end less than 10 - 1 = 9 below its 6:
    // both of its jobs go, 5 min after their checkpoint.
    assert_eq!(case(true, 15 * MIN), ["x1", "x2"]);
}

#[test]
fn a_node_registered_again_with_fewer_gpus_frees_its_overcommit_before_a_waiter_fits() {
    // n1 had 8 GPUs, all held by b (two 4-GPU jobs past their minimum runtime); it is
    // registered again with 4 (a GPU board failed). a, which the window ranks first, waits
    // for 4 GPUs: ordering off one job would leave 4 GPUs held on a 4-GPU node, nothing free,
    // so both must go.
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "x1", "b", 600, &[("n1", 4)]);
    h.running(0, "x2", "b", 600, &[("n1", 4)]);
    h.node("n1", 4);
    h.submit(MIN, "w", "a", 4, 3600);
    let now = HOUR;
    h.snapshot(now, &[("a", 0, ALLOC), ("b", gpu_h(100.0), ALLOC)]);
    let mut v = victims(&h.decide(now));
    v.sort();
    assert_eq!(v, ["x1", "x2"]);
}

#[test]
fn the_window_never_takes_an_allocation_below_its_floor() {
    let mut h = floor_case();
    // a has used nothing and holds its floor; b has used a lot and holds its floor too.
    h.running(0, "own", "a", 8 * 3600, &[("n1", 8)]);
    h.running(0, "x1", "b", 3600, &[("n2", 4)]);
    h.running(0, "x2", "b", 3600, &[("n2", 4)]);
    h.submit(MIN, "w", "a", 4, 3600);
    let now = 2 * HOUR + 5 * MIN;
    usage(&mut h, now, gpu_h(500.0));
    assert!(orders(&h.decide(now)).is_empty());
    h.state.set_share_floor(false);
    assert_eq!(victims(&h.decide(now)).len(), 1, "the window alone rotates");
}

#[test]
fn a_multi_node_floor_order_waits_until_its_victims_lose_little_on_average() {
    // Three 8-GPU nodes: floors of 12. b holds all 24 GPUs, a nothing; a's two-node job may
    // take 16 of them (b ends 4 below its floor, a was 12 below).
    let mut h = H::new();
    h.two_teams();
    for n in ["n1", "n2", "n3"] {
        h.node(n, 8);
    }
    h.running(0, "x1", "b", 3600, &[("n1", 8)]);
    h.running(0, "x2", "b", 3600, &[("n2", 8)]);
    h.running(15 * MIN, "x3", "b", 3600, &[("n3", 8)]);
    h.submit_full(MIN, "w", "a", 2, 8, 3600, 0, true);
    // At 2 h 20: x1 and x2 lost 20 min since their checkpoint, x3 5 min. The cheapest two
    // nodes lose 12.5 min per GPU on average, over a third of the 30 min interval.
    let early = 2 * HOUR + 20 * MIN;
    a_over_served(&mut h, early);
    assert!(orders(&h.decide(early)).is_empty());
    // At 2 h 32: x1 and x2 checkpointed 2 min ago.
    let fresh = 2 * HOUR + 32 * MIN;
    a_over_served(&mut h, fresh);
    let mut v = victims(&h.decide(fresh));
    v.sort();
    assert_eq!(v, ["x1", "x2"]);
}

#[test]
fn the_next_due_time_is_the_earliest_protection_end_while_allocated_work_waits() {
    let mut h = H::new();
    h.state.set_hourly_floor(false);
    h.two_teams();
    for n in ["n1", "n2", "n3"] {
        h.node(n, 8);
    }
    // A two-node job protected for 2 h, a one-node job for 1 h (started 10 min later), and
    // unallocated work, which is never protected.
    h.running(0, "big", "b", 2 * 3600, &[("n1", 8), ("n2", 8)]);
    h.running(10 * MIN, "small", "b", 3600, &[("n3", 4)]);
    h.running(0, "free", "b", 0, &[("n3", 4)]);
    let now = 20 * MIN;
    // Nothing waits: no protection end is due.
    assert_eq!(next_due(&h.state, now, &h.cfg), None);
    h.submit(now, "w", "a", 8, 3600);
    assert_eq!(next_due(&h.state, now, &h.cfg), Some(10 * MIN + HOUR));
    // Past that end, the two-node job's is next: named once, from its own start.
    assert_eq!(next_due(&h.state, 10 * MIN + HOUR, &h.cfg), Some(2 * HOUR));
    assert_eq!(next_due(&h.state, 2 * HOUR, &h.cfg), None);
}

#[test]
fn with_the_hourly_floor_the_end_of_the_hour_is_due_while_allocated_work_waits() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.running(0, "x", "b", 3 * 3600, &[("n1", 8)]);
    // Nothing waits: nothing is due.
    assert_eq!(next_due(&h.state, 20 * MIN, &h.cfg), None);
    // w waits: each hour's end (floors back to the shares) comes before x's protection ends
    // at 3 h.
    h.submit(20 * MIN, "w", "a", 8, 3600);
    assert_eq!(next_due(&h.state, 20 * MIN, &h.cfg), Some(HOUR));
    assert_eq!(next_due(&h.state, HOUR, &h.cfg), Some(2 * HOUR));
    assert_eq!(next_due(&h.state, 2 * HOUR - 1, &h.cfg), Some(2 * HOUR));
    // With the share floor off there is no floor to move: only the protection end.
    h.state.set_share_floor(false);
    assert_eq!(next_due(&h.state, 20 * MIN, &h.cfg), Some(3 * HOUR));
}

#[test]
fn gpus_of_work_already_ordered_off_count_as_soon_free() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.node("n2", 8);
    h.running(0, "u", "b", 3600, &[("n1", 8)]);
    h.running(0, "v", "b", 3600, &[("n2", 8)]);
    h.submit(0, "w", "a", 8, 3600);
    let now = 2 * HOUR;
    let first = orders(&h.step(now));
    assert_eq!(first.len(), 1, "one node's work makes room: {first:?}");
    // The order is folded; its victim still runs (grace) but its GPUs are on their way back:
    // the waiter needs nobody else.
    assert_eq!(h.decide(now), vec![]);
    assert_eq!(h.decide(now + 10 * SEC), vec![]);
}

#[test]
fn nodes_off_limits_are_matched_by_name_whatever_their_order() {
    let mut h = H::new();
    for n in ["n1", "n2", "n3", "n4"] {
        h.node(n, 8);
    }
    let view = crate::domain::view::View::new(&h.state, 0);
    let mask = crate::domain::victims::node_mask;
    assert_eq!(
        mask(&view, &["n4", "gone", "n2"]),
        vec![false, true, false, true]
    );
    assert_eq!(mask(&view, &["n1"]), vec![true, false, false, false]);
    assert!(mask(&view, &[]).is_empty(), "nothing off limits");
}

/// A job placed to end its protection before a window, whose launcher starts it late: once
/// starting it would carry its minimum runtime past the window, it is ordered off unstarted
/// (losing nothing) instead of being started and cut by the window.
#[test]
fn a_job_not_started_in_time_for_a_window_is_ordered_off_before_it_starts() {
    let t = 3 * HOUR;
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.maintenance(10 * MIN, &["n1"], t, t + HOUR);
    // Placed one hour (its minimum runtime) and a minute before T: the decision service's
    // rule (protection over 30 s before T) holds.
    let placed_at = t - HOUR - MIN;
    h.submit(placed_at, "late", "a", 4, 3600);
    h.place(placed_at, "late", &[("n1", 4)]);
    // Not started by T minus its minimum runtime: started then, it would still be protected
    // at T.
    assert_eq!(next_due(&h.state, placed_at, &h.cfg), Some(t - HOUR));
    assert_eq!(h.decide(t - HOUR - 1), vec![]);
    let out = h.decide(t - HOUR);
    assert_eq!(
        render(&out),
        vec![format!("order late for \"\" by {}", t - HOUR + 30 * SEC)]
    );
    let Body::PreemptionOrdered(p) = &out[0] else {
        unreachable!()
    };
    assert!(p.reason.contains("has not started"), "{}", p.reason);
    assert_eq!(causes(&out)[0].1, PreemptionCause::Maintenance);
    // Started in time, the same job is left to run out its protection before T.
    let mut h2 = H::new();
    h2.two_teams();
    h2.node("n1", 8);
    h2.maintenance(10 * MIN, &["n1"], t, t + HOUR);
    h2.submit(placed_at, "late", "a", 4, 3600);
    h2.place(placed_at, "late", &[("n1", 4)]);
    h2.start(placed_at + 30 * SEC, "late");
    assert_eq!(h2.decide(t - HOUR), vec![]);
    // A job that cannot resume is left to start late: ordered off, it would end unrun.
    let mut h3 = H::new();
    h3.two_teams();
    h3.node("n1", 8);
    h3.maintenance(10 * MIN, &["n1"], t, t + HOUR);
    h3.submit_full(placed_at, "once", "a", 1, 4, 3600, 0, false);
    h3.place(placed_at, "once", &[("n1", 4)]);
    assert_eq!(h3.decide(t - HOUR), vec![]);
}

#[test]
fn a_pass_that_requeues_orders_nothing_for_the_queue_it_has_not_folded_yet() {
    let mut h = H::new();
    h.state.set_share_floor(false);
    h.two_teams();
    h.node("n0", 8);
    h.node("n1", 8);
    // "r" of well-served `a` was ordered off and has just stopped; "x" of `b` took n0, and
    // unallocated "u" runs on n1. `b`'s "w" waits.
    h.running(0, "r", "a", 60, &[("n0", 8)]);
    h.ok(
        HOUR,
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "r".into(),
            grace_deadline_ms: HOUR + 30 * SEC,
            for_job_id: "x".into(),
            ..Default::default()
        }),
    );
    h.confirm(HOUR + 10 * SEC, "r");
    h.running(HOUR + 10 * SEC, "x", "b", 3600, &[("n0", 8)]);
    h.running_full(0, "u", "a", 0, &[("n1", 8)], true);
    h.submit(HOUR + 20 * SEC, "w", "b", 8, 3600);
    let now = HOUR + 30 * SEC;
    usage(&mut h, now, gpu_h(100.0));
    // The pass requeues "r" and stops there: its walk would not have met "r", which ranks
    // before "w" once it is back in the queue.
    assert_eq!(render(&h.step(now)), vec!["requeued r".to_owned()]);
    // The next pass makes room for "r", not "w".
    assert_eq!(
        orders(&h.decide(now)),
        vec![("u".to_owned(), "r".to_owned())]
    );
}

#[test]
fn a_job_not_yet_started_that_cannot_resume_is_no_victim() {
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.node("n2", 8);
    // Unallocated work on both nodes: "fresh" started on n2 and would lose 5 minutes of run;
    // "pulling" was placed on n1 and its launcher has not started it (it cannot resume, so an
    // order would end it before it ran, at no lost work).
    h.running_full(0, "fresh", "b", 0, &[("n2", 8)], true);
    h.submit_full(0, "pulling", "b", 1, 8, 0, 0, false);
    h.place(HOUR, "pulling", &[("n1", 8)]);
    h.submit(HOUR, "w", "a", 8, 3600);
    let now = HOUR + 5 * MIN;
    usage(&mut h, now, 0);
    assert_eq!(
        orders(&h.decide(now)),
        vec![("fresh".to_owned(), "w".to_owned())]
    );
    // Once it runs it may go like any unallocated work (it has lost less than "fresh").
    h.start(now, "pulling");
    assert_eq!(
        orders(&h.decide(now + SEC)),
        vec![("pulling".to_owned(), "w".to_owned())]
    );
}

/// The search passes over nodes without judging their jobs when nobody ranks below the waiter
/// and only unallocated work could go; work of an allocation no longer in the tree has no
/// claim either, so a node holding it must still be searched, for a single-node waiter and for
/// one that spans nodes.
#[test]
fn work_outside_the_tree_goes_even_when_nobody_ranks_below_the_waiter() {
    for nodes in [1u32, 2] {
        let mut h = H::new();
        // The window rule alone: a holds no floor to fall below.
        h.state.set_share_floor(false);
        h.tree(vec![leaf("a", 1), leaf("b", 1), leaf("gone", 1)]);
        h.node("n1", 8);
        h.node("n2", 8);
        h.running(0, "old1", "gone", 600, &[("n1", 8)]);
        h.running(0, "old2", "gone", 600, &[("n2", 8)]);
        h.two_teams();
        h.submit_full(MIN, "w", "a", nodes, 8, 3600, 0, true);
        // a has used far more than b: the window lets none of b's work go for a's waiter.
        let now = HOUR;
        h.snapshot(now, &[("a", gpu_h(500.0), ALLOC), ("b", 0, ALLOC)]);
        let expected: Vec<&str> = ["old1", "old2"][..nodes as usize].to_vec();
        assert_eq!(victims(&h.decide(now)), expected, "{nodes} node(s)");
    }
}

/// Nodes of two sizes: a 4-GPU job ties a wholly free 4-GPU node with an 8-GPU node half in
/// use. The decision cycle puts it on the node in use (best fit keeps whole nodes whole), so
/// the walk must too: giving it the free node would leave a two-node job behind it short of
/// two whole nodes, and order off the unallocated work of both others where one does.
#[test]
fn the_walk_breaks_ties_between_nodes_as_the_decision_cycle_does() {
    let mut h = H::new();
    h.two_teams();
    h.node("a", 4);
    h.node("b", 8);
    h.node("c", 4);
    h.node("d", 4);
    h.running(0, "busy", "b", 3600, &[("b", 4)]);
    h.running(0, "u1", "b", 0, &[("c", 4)]);
    h.running(0, "u2", "b", 0, &[("d", 4)]);
    h.submit(MIN, "w1", "a", 4, 3600);
    h.submit_full(MIN, "w2", "a", 2, 4, 3600, 0, true);
    let now = 2 * MIN;
    assert_eq!(
        h.placements(now),
        vec![("w1".to_owned(), "b".to_owned())],
        "the cycle's best fit"
    );
    let out = h.decide(now);
    assert_eq!(
        orders(&out).len(),
        1,
        "one node's work is enough: {:?}",
        render(&out)
    );
}

#[test]
fn a_placement_of_absurd_size_leaves_its_node_out_of_the_search() {
    // The decision fold takes a placement as the log gives it: here unallocated work said to
    // hold u32::MAX GPUs of n1's 8. A waiter short by that many GPUs there once made the
    // victim search size its table by the shortfall (gigabytes: the process aborted, and
    // again at every restart, folding the same entry). n1 is left out; n2's unallocated job
    // still goes for the waiter.
    let mut h = H::new();
    h.two_teams();
    h.node("n1", 8);
    h.node("n2", 8);
    h.submit(0, "huge", "b", 8, 0);
    h.place(0, "huge", &[("n1", u32::MAX)]);
    h.start(0, "huge");
    h.running(0, "u2", "b", 0, &[("n2", 8)]);
    h.submit(MIN, "w", "a", 8, 3600);
    assert_eq!(victims(&h.decide(2 * MIN)), ["u2"]);
}
