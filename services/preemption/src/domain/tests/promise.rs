//! GPUs freed or being freed for a waiting job count for that job alone in the preemption
//! pass, as the decision cycle hands them to it alone
//! ([`fairshare_decision::domain::promise`]).
use super::support::*;
use crate::domain::next_due;

/// n1 and n2 (8 GPUs) run `x1` and `x2` of allocation b, past their minimum runtime; n3 (4
/// GPUs) runs unallocated `u0`. `w` (a, 2 x 8 GPUs) waits and gets `x1` and `x2` ordered off
/// for it.
fn ordered_for_w() -> (H, i64) {
    let mut h = H::two_teams_on(&["n1", "n2"]);
    h.node("n3", 4);
    h.running(0, "x1", "b", 600, &[("n1", 8)]);
    h.running(0, "x2", "b", 600, &[("n2", 8)]);
    h.running(0, "u0", "b", 0, &[("n3", 4)]);
    h.submit_full(HOUR, "w", "a", 2, 8, 3600, 0, true);
    let now = 2 * HOUR;
    let mut first = orders(&h.step(now));
    first.sort();
    assert_eq!(
        first,
        vec![("x1".into(), "w".into()), ("x2".into(), "w".into())],
        "both whole nodes for w"
    );
    (h, now)
}

#[test]
fn a_better_placed_waiter_does_not_count_gpus_freed_for_another() {
    let (mut h, now) = ordered_for_w();
    // Inside the 30 s grace: x2 still runs.
    let later = now + 10 * SEC;
    h.confirm(later, "x1");
    // y (a, 4 GPUs) comes in ahead of w in a's queue. n1 is empty, but it was freed for w,
    // and x2's GPUs are on their way to w too: y must find its own room (the unallocated u0)
    // rather than count n1, which the decision cycle will not give it.
    h.submit_full(later, "y", "a", 1, 4, 3600, 1, true);
    // The pass that sees x1 gone owes it its requeue, and only that; the next finds y its own
    // victim. (x1, requeued, is not placed on n1 either.)
    assert_eq!(render(&h.step(later)), vec!["requeued x1".to_owned()]);
    let out = h.step(later);
    assert_eq!(
        orders(&out),
        vec![("u0".into(), "y".into())],
        "y's own victim, and nothing more for w"
    );
    assert_eq!(h.placements(later), vec![], "n1 is held for w");
    // And u0 itself is not refilled onto n1 meanwhile.
    h.submit(later, "u1", "b", 8, 0);
    assert_eq!(h.placements(later), vec![]);
    // Once x2 and u0 are gone, each gets what was freed for it.
    for v in ["x2", "u0"] {
        h.confirm(later + 10 * SEC, v);
    }
    assert_eq!(
        h.placements(later + 10 * SEC),
        vec![("w".into(), "n1,n2".into()), ("y".into(), "n3".into())]
    );
}

#[test]
fn a_waiter_with_gpus_on_their_way_needs_no_new_victims_however_they_come() {
    let (mut h, now) = ordered_for_w();
    h.confirm(now + 5 * SEC, "x1");
    // One node freed and promised, one still leaving: w is covered, pass after pass (the
    // first pass owes x1 its requeue).
    assert_eq!(render(&h.step(now + 5 * SEC)), vec!["requeued x1"]);
    for t in [now + 10 * SEC, now + 20 * SEC, now + 29 * SEC] {
        assert_eq!(orders(&h.step(t)), vec![], "at {t}");
    }
}

/// A promise that lapses with its job still unable to start frees its GPUs with no event: the
/// next due time names the lapse, so a service (or the simulator) passes then and the GPUs go
/// to other work rather than idling until something else happens.
#[test]
fn a_promise_lapsing_is_due_and_frees_its_gpus_then() {
    let (mut h, now) = ordered_for_w();
    // Both victims leave (orders at `now`, grace deadline `now + 30 s`), and n2 is cordoned:
    // w (2 x 8 GPUs) can no longer start, yet n1 stays promised to it until the deadline plus
    // the hold, `now + 30 s + 60 s`.
    h.confirm(now + 5 * SEC, "x1");
    h.cordon(now + 5 * SEC, "n2");
    h.confirm(now + 10 * SEC, "x2");
    let requeued = render(&h.step(now + 10 * SEC));
    assert_eq!(requeued, vec!["requeued x1", "requeued x2", "drained n2"]);
    let lapse = now + 90 * SEC;
    // Nothing else is due before the hour ends: only unallocated u0 runs, no order is out.
    assert_eq!(next_due(&h.state, now + 10 * SEC, &h.cfg), Some(lapse));
    assert_eq!(h.placements(lapse - 1), vec![], "n1 is still held for w");
    assert_eq!(
        h.placements(lapse),
        vec![("x1".into(), "n1".into())],
        "once the promise lapses, the requeued x1 takes n1"
    );
    assert_eq!(next_due(&h.state, lapse, &h.cfg), Some(3 * HOUR));
}

/// The view the fair-share walk hands on to the packing moves is the one a fresh read of the
/// state gives, although the walk claimed the GPUs freed and leaving for w and gave them to it.
#[test]
fn the_walked_view_is_handed_on_as_the_state_gives_it() {
    let (mut h, now) = ordered_for_w();
    let later = now + 10 * SEC;
    h.confirm(later, "x1");
    let fresh = crate::domain::view::View::new(&h.state, later);
    let (_, walked) = crate::domain::victims::fair_share_and_view(&h.state, later, &h.cfg);
    let walked = walked.expect("w waits: a view was built");
    let counts = |v: &crate::domain::view::View<'_>| {
        v.nodes
            .iter()
            .map(|n| (n.name.to_owned(), n.free, n.pending, n.taken))
            .collect::<Vec<_>>()
    };
    assert_eq!(counts(&walked), counts(&fresh));
    assert!(
        counts(&fresh).iter().any(|(_, free, _, _)| *free == 0),
        "n1 is held for w alone in a fresh view"
    );
}
