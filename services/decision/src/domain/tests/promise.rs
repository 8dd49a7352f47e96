//! Promises: GPUs freed by a preemption order go to the job the order was for, and to nobody
//! else until it is placed, leaves the queue, or the promise lapses.

use fairshare_events::pb::{self, event::Body};

use super::support::*;
use crate::domain::promise::PROMISE_HOLD_MS;

fn order(h: &mut H, at: i64, victim: &str, for_job: &str, deadline: i64) {
    h.ok(
        at,
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: victim.into(),
            grace_deadline_ms: deadline,
            reason: "test".into(),
            for_job_id: for_job.into(),
            basis: None,
            cause: pb::PreemptionCause::Window as i32,
        }),
    );
}

fn preempted(h: &mut H, at: i64, victim: &str) {
    h.ok(
        at,
        Body::JobPreempted(pb::JobPreempted {
            job_id: victim.into(),
            killed: false,
        }),
    );
}

fn finished(h: &mut H, at: i64, job: &str) {
    h.ok(
        at,
        Body::JobFinished(pb::JobFinished {
            job_id: job.into(),
            ..Default::default()
        }),
    );
}

/// Three 8-GPU nodes: `v1` on n1 and `v2` on n2 (allocation b, past their minimum runtime),
/// `r` on n3 (allocation a). `w` (a, 2 x 8 GPUs) waits; so do `s` (b, 8 GPUs) and `u`
/// (unallocated, 8 GPUs). Both victims are ordered off for `w` at `t0`, `v1` by `d1` and `v2`
/// by `d2`.
const T0: i64 = 10 * HOUR;
const D1: i64 = T0 + 5 * MIN;
const D2: i64 = T0 + 10 * MIN;

fn cluster() -> H {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    for n in ["n1", "n2", "n3"] {
        h.node(n, 8);
    }
    h.running(0, "v1", "b", 60, &[("n1", 8)]);
    h.running(0, "v2", "b", 60, &[("n2", 8)]);
    h.running(0, "r", "a", 100 * 3600, &[("n3", 8)]);
    h.submit_full(HOUR, "w", "a", 2, 8, 3600, 0, true);
    h.submit(HOUR, "s", "b", 8, 3600);
    h.submit(HOUR, "u", "b", 8, 0);
    order(&mut h, T0, "v1", "w", D1);
    order(&mut h, T0, "v2", "w", D2);
    h
}

#[test]
fn gpus_freed_for_a_waiter_go_to_nobody_else_while_its_other_victims_leave() {
    let mut h = cluster();
    preempted(&mut h, T0 + MIN, "v1");
    // n1 is empty, but it was freed for w, which still needs n2: neither s nor the
    // unallocated u may take it (they would be ordered off again for w).
    let d = h.decide(T0 + MIN);
    assert_eq!(placed(&d), vec![]);
    // Told why: not "too large", though nothing else is free; named whose and until when.
    assert_eq!(reason(&d, "u"), "promised_to_another_job");
    let why = reason_text;
    let until = fairshare_model::timestamp::utc(D2 + crate::domain::promise::PROMISE_HOLD_MS);
    assert_eq!(
        why(&d, "u"),
        format!(
            "would fit only on GPUs a preemption freed for waiting job w; they are held for it \
             until it starts, {until} at the latest"
        )
    );
    // w itself is told room is being made for it, not that it waits for the rules.
    assert_eq!(reason(&d, "w"), "room_being_made");
    assert!(
        why(&d, "w").contains(&format!("held for it alone until {until}")),
        "{}",
        why(&d, "w")
    );
    // s ranks above w, but its reservation is planned off the promised GPUs, so it does
    // not block w either.
    assert_eq!(reason(&d, "s"), "reservation_pending");
    assert_eq!(placed(&h.decide(D2)), vec![]);
    preempted(&mut h, D2, "v2");
    assert_eq!(
        placed(&h.decide(D2)),
        vec![("w".into(), vec![("n1".into(), 8), ("n2".into(), 8)])]
    );
    h.place(D2, "w", &[("n1", 8), ("n2", 8)]);
    assert!(
        h.state.promise_for("w", D2).is_none(),
        "placed: nothing held"
    );
}

#[test]
fn a_promise_lapses_after_the_latest_deadline_and_a_minute() {
    let mut h = cluster();
    preempted(&mut h, T0 + MIN, "v1");
    // v2 overstays its deadline (the preemption service is down, say): n1 is held for w
    // until the latest deadline of w's orders plus the hold, then it is anyone's again.
    let lapse = D2 + PROMISE_HOLD_MS;
    assert_eq!(placed(&h.decide(lapse - 1)), vec![]);
    assert_eq!(
        placed(&h.decide(lapse)),
        vec![("s".into(), vec![("n1".into(), 8)])]
    );
}

#[test]
fn a_promise_ends_when_its_job_leaves_the_queue() {
    let mut h = cluster();
    preempted(&mut h, T0 + MIN, "v1");
    h.ok(
        T0 + 2 * MIN,
        Body::JobCancelled(pb::JobCancelled {
            job_id: "w".into(),
            ..Default::default()
        }),
    );
    assert_eq!(
        placed(&h.decide(T0 + 2 * MIN)),
        vec![("s".into(), vec![("n1".into(), 8)])]
    );
}

#[test]
fn a_victim_that_finishes_on_its_own_frees_its_gpus_for_the_waiter_too() {
    let mut h = cluster();
    finished(&mut h, T0 + MIN, "v1");
    assert_eq!(placed(&h.decide(T0 + MIN)), vec![]);
    assert_eq!(
        h.state.promise_for("w", T0 + MIN).map(|p| p.nodes.len()),
        Some(1)
    );
}

#[test]
fn orders_without_a_waiter_promise_nothing() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n1", 8);
    h.running(0, "v1", "b", 60, &[("n1", 8)]);
    h.submit(HOUR, "s", "b", 8, 3600);
    // A drain's order names no waiting job: what it frees is anyone's.
    order(&mut h, T0, "v1", "", D1);
    preempted(&mut h, T0 + MIN, "v1");
    assert_eq!(
        placed(&h.decide(T0 + MIN)),
        vec![("s".into(), vec![("n1".into(), 8)])]
    );
}

#[test]
fn a_waiter_placed_on_other_gpus_releases_what_was_promised() {
    let mut h = cluster();
    preempted(&mut h, T0 + MIN, "v1");
    // r ends early: w could go on n3 and n1 now; it is placed, and nothing stays held.
    finished(&mut h, T0 + 2 * MIN, "r");
    let d = h.decide(T0 + 2 * MIN);
    assert_eq!(
        placed(&d),
        vec![("w".into(), vec![("n1".into(), 8), ("n3".into(), 8)])]
    );
}

#[test]
fn a_job_plans_its_reservation_on_the_gpus_promised_to_it() {
    use crate::domain::reserve::reserved_nodes;
    use fairshare_model::shape::Shape;
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n1", 8);
    h.node("n2", 8);
    // n1: v (2 GPUs, ordered off for w) beside p (6, protected 10 h); n2: q (8, protected
    // 20 h).
    h.running(0, "v", "b", 60, &[("n1", 2)]);
    h.running(0, "p", "b", 10 * 3600, &[("n1", 6)]);
    h.running(0, "q", "b", 20 * 3600, &[("n2", 8)]);
    h.submit(HOUR, "w", "a", 8, 3600);
    order(&mut h, 2 * HOUR, "v", "w", 2 * HOUR + MIN);
    preempted(&mut h, 2 * HOUR + MIN, "v");
    let eight = Shape {
        nodes: 1,
        gpus_per_node: 8,
    };
    let now = 2 * HOUR + MIN;
    // w counts n1's promised GPUs as its own, as the decision cycle does: n1 is the earlier.
    assert_eq!(reserved_nodes(&h.state, "w", eight, HOUR, now), ["n1"]);
    assert_eq!(reserved_nodes(&h.state, "x", eight, HOUR, now), ["n2"]);
    assert_eq!(h.decide(now).reservation.map(|r| r.job_id), Some("w"));
}

#[test]
fn the_skip_test_counts_promised_gpus_for_their_job_alone() {
    let mut h = cluster();
    // No promise yet: both rooms are the free GPUs.
    assert_eq!(
        h.state.free_room_at_given(T0, h.state.free_room()),
        h.state.free_room_at(T0)
    );
    preempted(&mut h, T0 + MIN, "v1");
    let now = T0 + MIN;
    // n1 is free but held for w, which still needs n2: no cycle can place anything, though
    // the free GPUs alone (the old test) say s or u would fit.
    assert!(h.state.any_queued_shape_fits_in(&h.state.free_room()));
    let room = h.state.free_room_at(now);
    assert!(!room.any_free());
    // Given the room with promised GPUs, the same answer, not that room.
    assert_eq!(h.state.free_room_at_given(now, h.state.free_room()), room);
    assert!(!h.state.any_queued_shape_fits_at(&room, now));
    assert!(h.decide(now).placements.is_empty());
    // Once v2 is gone too, w fits its promised nodes.
    preempted(&mut h, D2, "v2");
    let room = h.state.free_room_at(D2);
    assert_eq!(h.state.free_room_at_given(D2, h.state.free_room()), room);
    assert!(
        !h.state.any_queued_shape_fits_in(&room),
        "n1 and n2 are both w's"
    );
    assert!(h.state.any_queued_shape_fits_at(&room, D2));
    assert!(!h.decide(D2).placements.is_empty());
    // Every free GPU is promised: a cycle without reasons must still meet w, not stop at
    // the first sight of no free GPU.
    let quick = crate::domain::decide_placements(&h.state, D2);
    assert_eq!(quick.placements, h.decide(D2).placements);
    assert_eq!(quick.reservation, h.decide(D2).reservation);
}

#[test]
fn explain_shows_what_is_held_for_a_waiter_and_who_still_stops_for_it() {
    let mut h = cluster();
    let explain = |h: &H, job: &str, now: i64| crate::domain::explain(&h.state, job, now).unwrap();
    // Ordered, nobody gone yet: nothing held, both victims still stopping.
    let e = explain(&h, "w", T0 + 1);
    assert!(e.held_for_it.is_empty());
    assert_eq!(e.held_until_ms, 0);
    assert_eq!(e.victims_stopping, ["v1", "v2"]);
    preempted(&mut h, T0 + MIN, "v1");
    let e = explain(&h, "w", T0 + MIN);
    assert_eq!(
        e.held_for_it,
        [pb::NodeGpus {
            node: "n1".into(),
            gpus: 8
        }]
    );
    assert_eq!(e.held_until_ms, D2 + PROMISE_HOLD_MS);
    assert_eq!(e.victims_stopping, ["v2"]);
    // Another waiter is told nothing of w's room.
    let e = explain(&h, "s", T0 + MIN);
    assert!(e.held_for_it.is_empty() && e.victims_stopping.is_empty());
    // Once the promise lapses, nothing is held any more.
    let e = explain(&h, "w", D2 + PROMISE_HOLD_MS);
    assert!(e.held_for_it.is_empty());
}

/// Two holds: `x`'s (2 GPUs of n1, ending first) and `y`'s (the whole of n2, ending later). An
/// 8-GPU job could start only on n2: it waits for `y`'s hold, and is told so, not `x`'s.
#[test]
fn a_waiter_is_told_of_the_hold_it_waits_for_not_the_first_to_end() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    for n in ["n1", "n2", "n3"] {
        h.node(n, 8);
    }
    h.running(0, "r1", "b", 100 * 3600, &[("n1", 6)]);
    h.running(0, "v1", "b", 60, &[("n1", 2)]);
    h.running(0, "v2", "b", 60, &[("n2", 8)]);
    h.running(0, "v3", "b", 60, &[("n3", 8)]);
    h.submit_full(HOUR, "x", "a", 1, 4, 3600, 0, true);
    h.submit_full(HOUR, "y", "a", 2, 8, 3600, 0, true);
    h.submit(HOUR, "z", "b", 8, 0);
    order(&mut h, T0, "v1", "x", D1);
    order(&mut h, T0, "v2", "y", D2);
    order(&mut h, T0, "v3", "y", D2);
    preempted(&mut h, T0 + MIN, "v1");
    preempted(&mut h, T0 + MIN, "v2");
    let d = h.decide(T0 + MIN);
    assert_eq!(placed(&d), vec![]);
    assert_eq!(reason(&d, "z"), "promised_to_another_job");
    let until = fairshare_model::timestamp::utc(D2 + PROMISE_HOLD_MS);
    let said = reason_text(&d, "z");
    assert!(
        said.contains("for waiting job y;") && said.contains(&format!("{until} at the latest")),
        "{said}"
    );
}
