//! Hand-computed tests of packing moves ([`crate::domain::pack`]): which jobs move, when, and
//! that the decision service then puts them in the holes and the waiter on the emptied node.

use fairshare_events::pb::event::Body;

use super::support::{H, HOUR, MIN, SEC, orders, render};
use crate::domain::{Config, FairShare, fair_share};

/// Allocated time of each team in the snapshots.
const ALLOC: u64 = 1000 * HOUR as u64;

/// Two 8-GPU nodes: on `n1` job `m` of team `a` (2 GPUs, 10 min minimum runtime, started at
/// `m_start`, `m_resumable`); on `n2` job `p` of team `a` holding `p_gpus`, protected for 8 h.
/// Team `a` waits with `w`, 8 GPUs on one node. Nobody else runs, so no rule lets `w` take
/// anything: its own allocation's work is never a victim of a job that is not debug.
fn fragmented(m_start: i64, m_resumable: bool, p_gpus: u32) -> H {
    let mut h = H::two_teams_on(&["n1", "n2"]);
    h.running_full(m_start, "m", "a", 600, &[("n1", 2)], m_resumable);
    h.running(0, "p", "a", 8 * 3600, &[("n2", p_gpus)]);
    h.submit(0, "w", "a", 8, 3600);
    h
}

fn usage(h: &mut H, now: i64) {
    h.snapshot(now, &[("a", 0, ALLOC), ("b", 0, ALLOC)]);
}

#[test]
fn a_blocked_waiter_gets_a_node_by_moving_a_small_job_into_a_hole_elsewhere() {
    let mut h = fragmented(0, true, 6);
    let now = HOUR + 5 * MIN;
    usage(&mut h, now);
    assert!(matches!(
        fair_share(&h.state, now, &h.cfg),
        FairShare::Blocked(line) if line.first.job_id == "w"
    ));
    let out = h.step(now);
    assert_eq!(
        render(&out),
        vec![format!("order m for \"w\" by {}", now + 30 * SEC)]
    );
    let Body::PreemptionOrdered(order) = &out[0] else {
        unreachable!()
    };
    assert_eq!(
        order.cause(),
        fairshare_events::pb::PreemptionCause::Packing
    );
    // Ran 65 min, checkpointed at 60: 5 min of 2 GPUs lost.
    assert_eq!(
        order.reason,
        "packing: moves m (past its minimum runtime) to free GPUs on another node so that job \
         w of a, first in line and blocked, fits on n1; lost work 600 GPU-s"
    );
    // One move at a time: nothing more while it is under way.
    assert_eq!(h.decide(now), vec![]);

    // The launcher stops it; it is requeued; the decision cycle puts it in the hole on n2 and
    // the waiter on the emptied n1.
    let stop = now + 10 * SEC;
    h.confirm(stop, "m");
    assert_eq!(render(&h.step(stop)), vec!["requeued m"]);
    assert_eq!(
        h.placements(stop),
        vec![("m".into(), "n2".into()), ("w".into(), "n1".into())]
    );
}

#[test]
fn no_move_when_the_holes_cannot_hold_the_jobs_in_the_way() {
    // n2 and n3 have 1 free GPU each: 2 in all, but no hole holds `m` (2 GPUs).
    let mut h = fragmented(0, true, 7);
    h.node("n3", 8);
    h.running(0, "q", "a", 8 * 3600, &[("n3", 7)]);
    let now = HOUR + 5 * MIN;
    usage(&mut h, now);
    assert_eq!(h.decide(now), vec![]);
}

#[test]
fn never_moves_protected_or_unresumable_work() {
    // Inside its 10 min minimum runtime.
    let mut h = fragmented(0, true, 6);
    let now = 9 * MIN;
    usage(&mut h, now);
    assert_eq!(h.decide(now), vec![]);
    // The first instant it is past it, it may move.
    let now = 10 * MIN;
    usage(&mut h, now);
    assert_eq!(orders(&h.decide(now)), vec![("m".into(), "w".into())]);

    // A job that cannot resume would lose its whole run.
    let mut h = fragmented(0, false, 6);
    let now = HOUR + 5 * MIN;
    usage(&mut h, now);
    assert_eq!(h.decide(now), vec![]);
}

#[test]
fn packing_can_be_turned_off() {
    let mut h = fragmented(0, true, 6);
    h.cfg = Config {
        packing: false,
        ..Config::default()
    };
    let now = HOUR + 5 * MIN;
    usage(&mut h, now);
    assert_eq!(h.decide(now), vec![]);
}

#[test]
fn no_move_while_a_queued_job_fits_the_free_gpus() {
    let mut h = fragmented(0, true, 6);
    // A 2-GPU job fits the hole on n2: the next decision cycle places it there, so the hole
    // is not free for `m`.
    h.submit(HOUR, "small", "b", 2, 600);
    let now = HOUR + 5 * MIN;
    usage(&mut h, now);
    assert_eq!(h.decide(now), vec![]);
}

#[test]
fn the_node_whose_moves_lose_the_least_work_is_emptied() {
    let mut h = H::two_teams_on(&["n1", "n2", "n3"]);
    // n1: `old` ran 50 min, 20 min past its last checkpoint. n3: `fresh` ran 35 min, 5 min
    // past. n2: a 4-GPU hole beside protected work.
    h.running(0, "old", "a", 600, &[("n1", 2)]);
    h.running(15 * MIN, "fresh", "a", 600, &[("n3", 2)]);
    h.running(0, "p", "a", 8 * 3600, &[("n2", 4)]);
    h.submit(0, "w", "a", 8, 3600);
    let now = 50 * MIN;
    usage(&mut h, now);
    let out = h.decide(now);
    assert_eq!(orders(&out), vec![("fresh".into(), "w".into())]);
    let Body::PreemptionOrdered(order) = &out[0] else {
        unreachable!()
    };
    assert!(order.reason.contains("fits on n3; lost work 600 GPU-s"));
}

#[test]
fn behind_a_blocked_multi_node_job_a_move_stays_off_its_reserved_nodes() {
    let mut h = H::two_teams_on(&["n1", "n2", "n3", "n4"]);
    // Whole nodes come free for `f` (2 x 8 GPUs) at 2 h (n1) and 3 h (n2): its reservation.
    // n3: a 2-GPU hole beside work protected for 8 h. n4: `m` (2 GPUs, past its minimum
    // runtime), 2 GPUs protected for 8 h, and 4 free.
    h.running(0, "m", "a", 600, &[("n4", 2)]);
    h.running(0, "p1", "a", 2 * 3600, &[("n1", 8)]);
    h.running(0, "p2", "a", 3 * 3600, &[("n2", 8)]);
    h.running(0, "p3", "a", 8 * 3600, &[("n3", 6)]);
    h.running(0, "r4", "a", 8 * 3600, &[("n4", 2)]);
    h.submit_full(0, "f", "a", 2, 8, 3600, 0, true);
    h.submit(0, "w", "a", 6, 3600);
    let now = HOUR + 5 * MIN;
    usage(&mut h, now);
    let FairShare::Blocked(line) = fair_share(&h.state, now, &h.cfg) else {
        panic!("f is blocked")
    };
    assert_eq!(line.first.job_id, "f");
    assert_eq!(
        line.behind.iter().map(|w| w.job_id).collect::<Vec<_>>(),
        vec!["w"]
    );
    // `f` spans nodes: no move for it. `w` fits n4 once `m` is in the hole on n3; neither
    // is a reserved node.
    let out = h.step(now);
    assert_eq!(orders(&out), vec![("m".into(), "w".into())]);
    let Body::PreemptionOrdered(order) = &out[0] else {
        unreachable!()
    };
    assert!(
        order.reason.contains(
            "so that job w of a, behind blocked job f, off the nodes reserved for it, fits on n4"
        ),
        "{}",
        order.reason
    );
    let stop = now + 10 * SEC;
    h.confirm(stop, "m");
    assert_eq!(render(&h.step(stop)), vec!["requeued m"]);
    assert_eq!(
        h.placements(stop),
        vec![("m".into(), "n3".into()), ("w".into(), "n4".into())]
    );
    assert_eq!(
        h.reserved(stop),
        vec!["n1", "n2"],
        "f keeps its reservation"
    );
}

#[test]
fn no_move_onto_or_out_of_a_blocked_jobs_reserved_nodes() {
    let mut h = H::two_teams_on(&["n1", "n2", "n3"]);
    // `f` (2 x 8) is reserved n1 (2 h) and n3, whose only work is `m`, past its minimum
    // runtime. Moving `m` to the hole on n2 would let `w` (7 GPUs) start on n3, inside the
    // reservation: not done.
    h.running(0, "m", "a", 600, &[("n3", 2)]);
    h.running(0, "p1", "a", 2 * 3600, &[("n1", 8)]);
    h.running(0, "p2", "a", 8 * 3600, &[("n2", 6)]);
    h.submit_full(0, "f", "a", 2, 8, 3600, 0, true);
    h.submit(0, "w", "a", 7, 3600);
    let now = HOUR + 5 * MIN;
    usage(&mut h, now);
    assert!(matches!(
        fair_share(&h.state, now, &h.cfg),
        FairShare::Blocked(line) if line.first.job_id == "f" && line.behind.len() == 1
    ));
    assert_eq!(h.reserved(now), vec!["n1", "n3"]);
    assert_eq!(h.decide(now), vec![]);
}

#[test]
fn a_job_left_queued_under_a_removed_allocation_does_not_switch_packing_off() {
    let mut h = fragmented(0, true, 6);
    // A 2-GPU job of an allocation no longer in the tree fits n2's hole, but no cycle will
    // ever place it: packing must go on as if it were not there.
    h.submit(0, "orphan", "gone", 2, 3600);
    let now = HOUR + 5 * MIN;
    usage(&mut h, now);
    assert!(h.state.decision().any_queued_shape_fits());
    assert_eq!(
        render(&h.step(now)),
        vec![format!("order m for \"w\" by {}", now + 30 * SEC)]
    );
}

#[test]
fn a_node_held_beyond_its_capacity_is_not_packed_for_nothing() {
    // n1 was registered again with 4 of its 8 GPUs while b's four 2-GPU jobs run on it; n2
    // and n3 each have a 3-GPU hole beside a's protected work. b's 4-GPU waiter fits nowhere.
    // Moving two of n1's jobs into the holes would leave n1 with 4 GPUs held and none free:
    // it lacks 8 GPUs, not 4, and the holes hold only 6, so nothing moves.
    let mut h = H::new();
    h.two_teams();
    for n in ["n1", "n2", "n3"] {
        h.node(n, 8);
    }
    for i in 1..=4 {
        h.running(0, &format!("x{i}"), "b", 600, &[("n1", 2)]);
    }
    h.running(0, "y", "a", 8 * 3600, &[("n2", 5)]);
    h.running(0, "z", "a", 8 * 3600, &[("n3", 5)]);
    h.node("n1", 4);
    h.submit(MIN, "w", "b", 4, 3600);
    let out = h.decide(HOUR);
    assert!(orders(&out).is_empty(), "{out:?}");
}
