//! The hourly share floor: hour meters folded from job events, and the floor shifts they give
//! (hand-computed).

use fairshare_events::pb::{self, event::Body};

use super::support::*;
use crate::domain::hourly::{MILLI, balance, shift_milli};
use crate::domain::rank::ranking;

/// An hour boundary.
const T: i64 = 10 * HOUR;
/// GPU-ms in a GPU-minute.
const GPU_MIN: u128 = MIN as u128;

/// Two allocations of equal share on two 8-GPU nodes: floors of 8 GPUs each.
fn two_on_two() -> H {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    h.node("n1", 8);
    h
}

fn floor_gpus(h: &H, allocation: &str, now: i64) -> f64 {
    let tree = h.state.budget_tree().unwrap();
    let id = tree.allocation(allocation).unwrap();
    let s = ranking(&h.state, tree, now).floor_standing(id).unwrap();
    s.floor_num as f64 / s.floor_den as f64
}

#[test]
fn a_meter_integrates_run_and_demand_within_the_hour_and_starts_each_hour_afresh() {
    let mut h = two_on_two();
    h.submit(T + 10 * MIN, "j1", "a", 4, 3600);
    h.place(T + 20 * MIN, "j1", &[("n0", 4)]);
    h.submit(T + 30 * MIN, "j2", "a", 8, 3600);
    let m = *h.state.hour_meter("a").unwrap();
    // Demand 4 GPUs from 10 min, 12 from 30 min; run 4 from 20 min.
    assert_eq!(m.at(T + 40 * MIN), (4 * 20 * GPU_MIN, 200 * GPU_MIN));
    // The next hour counts from its start, at the rates in force.
    assert_eq!(
        m.at(T + HOUR + 5 * MIN),
        (4 * 5 * GPU_MIN, 12 * 5 * GPU_MIN)
    );
    // b has had no job: no meter.
    assert!(h.state.hour_meter("b").is_none());
    // A refused event (j1 placed twice) moves nothing, the meter's mark included.
    let before = h.state.clone();
    assert!(
        h.apply(
            T + 50 * MIN,
            Body::JobPlaced(pb::JobPlaced {
                job_id: "j1".into(),
                nodes: vec![pb::NodeGpus {
                    node: "n1".into(),
                    gpus: 4,
                }],
                basis: None,
            }),
        )
        .is_err()
    );
    assert_eq!(h.state.hour_meter("a"), before.hour_meter("a"));
}

/// A cluster whose nodes arrive part-way through an hour owes nothing for the minutes before:
/// an allocation that ran its share since then is not behind (the demo starts mid-hour).
#[test]
fn time_before_the_nodes_were_registered_is_not_owed() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    let register = |h: &mut H, at: i64, node: &str| {
        h.ok(
            at,
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: CLUSTER.into(),
                node: node.into(),
                gpus: 8,
            }),
        );
    };
    // Nodes from 30 min into the hour; a runs 8 GPUs (its floor) from then on, and asks for
    // more; b runs 8 too.
    register(&mut h, T + 30 * MIN, "n0");
    register(&mut h, T + 30 * MIN, "n1");
    h.running(T + 30 * MIN, "a1", "a", 600, &[("n0", 8)]);
    h.running(T + 30 * MIN, "b1", "b", 600, &[("n1", 8)]);
    h.submit(T + 30 * MIN, "a2", "a", 8, 3600);
    // 40 min in: owed 8 GPUs x 10 min, and run as much: its floor stays 8. (Counting the
    // hour from its start, a would be owed all it asked for, 16 x 10 min, 80 GPU-min behind
    // over the 20 min left: raised to 12.)
    assert_eq!(floor_gpus(&h, "a", T + 40 * MIN), 8.0);
    assert_eq!(floor_gpus(&h, "b", T + 40 * MIN), 8.0);
    // A node that joins later in the hour counts from then: with a third node at 40 min the
    // floors are 12 GPUs, and at 45 min each allocation is owed half of 16 x 10 min + 24 x 5
    // min = 140 GPU-min (capped by its demand). a ran 8 x 15 = 120 and asked for more: 20
    // GPU-min behind over the 15 min left, 1.33 GPUs, so 1 whole GPU more. b asked for no more
    // than it ran: owed 120, ran 120, unmoved.
    register(&mut h, T + 40 * MIN, "n2");
    assert_eq!(floor_gpus(&h, "a", T + 45 * MIN), 13.0);
    assert_eq!(floor_gpus(&h, "b", T + 45 * MIN), 12.0);
}

/// A budget tree applied mid-hour owes each allocation its old fraction before and its new one
/// after, as the accounting ledger splits the hour: not its new fraction for the whole hour.
/// [`two_on_two`] busy from before the hour `T`: a runs 8 GPUs and asks for 8 more, b runs 8.
fn a_asking_for_more() -> H {
    let mut h = two_on_two();
    h.running(T - HOUR, "a1", "a", 600, &[("n0", 8)]);
    h.submit(T - HOUR, "a2", "a", 8, 3600);
    h.running(T - HOUR, "b1", "b", 600, &[("n1", 8)]);
    h
}

/// The manager gives a three quarters of the cluster, at `at`: floors 12 and 4.
fn give_a_three_quarters(h: &mut H, at: i64) {
    h.ok(
        at,
        Body::BudgetTreeSet(pb::BudgetTreeSet {
            cluster: CLUSTER.into(),
            accounts: vec![leaf("a", 3), leaf("b", 1)],
        }),
    );
}

#[test]
fn a_budget_changed_mid_hour_owes_the_old_fractions_before_the_change() {
    let mut h = a_asking_for_more();
    give_a_three_quarters(&mut h, T + 30 * MIN);
    // 45 min in, a is owed 8 x 30 + 12 x 15 = 420 GPU-min and ran 360: 60 behind over the
    // 20 min spread, 3 GPUs more. b is owed 8 x 30 + 4 x 15 = 300 and ran 360: 3 fewer,
    // balanced against a's raise. (Owed the new fractions for the whole hour, a would be
    // 180 behind, raised to 21, and b cut to 0.)
    assert_eq!(floor_gpus(&h, "a", T + 45 * MIN), 15.0);
    assert_eq!(floor_gpus(&h, "b", T + 45 * MIN), 1.0);
    // The next hour owes the new fractions from its start: a 12 x 30 = 360 against 240 run,
    // 120 behind over the 30 min left; b 120 against 240, cut by its whole floor.
    assert_eq!(floor_gpus(&h, "a", T + HOUR + 30 * MIN), 16.0);
    assert_eq!(floor_gpus(&h, "b", T + HOUR + 30 * MIN), 0.0);
}

/// A budget tree stamped in an earlier hour than the open one (a writer whose clock runs
/// behind) takes over from the last change: it does not wipe what the open hour owed under
/// the trees before it.
#[test]
fn a_budget_stamped_before_the_open_hour_does_not_undo_its_owed_time() {
    let mut h = a_asking_for_more();
    give_a_three_quarters(&mut h, T + 30 * MIN);
    // The same tree again, stamped 10 s before the hour began: a is still owed 8 x 30 under
    // the first tree and 12 x 15 since, as in the case above (reset, it would be owed 12 x 45
    // and raised to 21).
    give_a_three_quarters(&mut h, T - 10_000);
    assert_eq!(floor_gpus(&h, "a", T + 45 * MIN), 15.0);
    assert_eq!(floor_gpus(&h, "b", T + 45 * MIN), 1.0);
}

/// Owed time under a replaced tree is taken exactly, as the accounting ledger takes it, even
/// for the deepest allocation of a tree whose fractions are huge before reduction.
#[test]
fn owed_time_before_a_change_is_exact_in_the_deepest_tree() {
    use crate::domain::hourly::OwedBefore;
    use fairshare_model::budget::BudgetTree;
    // Six levels of two siblings of share 100,000: the deepest allocation holds 1/64 as
    // 10^30 / 6.4 x 10^31.
    let mut level = vec![leaf("d", 100_000), leaf("e", 100_000)];
    for name in ["x5", "x4", "x3", "x2", "x1"] {
        level = vec![
            acc(name, 100_000, level),
            leaf(&format!("{name}y"), 100_000),
        ];
    }
    let tree = BudgetTree::from_accounts(&level).unwrap();
    let deepest = "x1/x2/x3/x4/x5/d";
    assert!(tree.allocation(deepest).is_some());
    // 64 GPUs for the first 30 min of the hour: 1/64 of it is 30 GPU-min.
    let capacity_area = 64 * 30 * GPU_MIN;
    let mut owed = OwedBefore::default();
    owed.close(None, 0, T);
    owed.close(Some(&tree), capacity_area, T + 30 * MIN);
    assert_eq!(
        owed.milli(deepest, T + 40 * MIN),
        30 * GPU_MIN * MILLI as u128
    );
    // Another hour owes nothing before.
    assert_eq!(owed.milli(deepest, T + HOUR), 0);
}

#[test]
fn a_floor_moves_by_what_is_behind_spread_over_the_rest_of_the_hour() {
    let big = u128::MAX / 4;
    let floor = 8 * MILLI;
    // 30 min in, nothing run, plenty asked for: 240 GPU-min behind over the 30 min left.
    assert_eq!(shift_milli(floor, 0, big, T + 30 * MIN), 8 * MILLI);
    // 15 min in: 120 GPU-min over 45 min left, 2.67 GPUs, whole GPUs only.
    assert_eq!(shift_milli(floor, 0, big, T + 15 * MIN), 2 * MILLI);
    // 50 min in: spread over 20 min at least, and never more than the floor again.
    assert_eq!(shift_milli(floor, 0, big, T + 50 * MIN), 8 * MILLI);
    // Owed is capped by demand: 60 GPU-min asked for so far, 2 GPUs over the 30 min left.
    assert_eq!(shift_milli(floor, 0, 60 * GPU_MIN, T + 30 * MIN), 2 * MILLI);
    // Ahead: 16 GPUs run for 30 min, 240 GPU-min beyond the 240 owed: cut by the whole floor.
    assert_eq!(
        shift_milli(floor, 16 * 30 * GPU_MIN, big, T + 30 * MIN),
        -8 * MILLI
    );
    // A little behind (10 GPU-min) moves nothing: less than a GPU for the rest of the hour.
    assert_eq!(shift_milli(floor, 230 * GPU_MIN, big, T + 30 * MIN), 0);
}

#[test]
fn an_allocation_behind_this_hour_gets_a_higher_floor_and_one_ahead_gives_up_as_much() {
    let mut h = two_on_two();
    // b holds both nodes from before the hour; a waits for 8 GPUs from the hour's start.
    h.running(T - HOUR, "x1", "b", 600, &[("n0", 8)]);
    h.running(T - HOUR, "x2", "b", 600, &[("n1", 8)]);
    h.submit(T, "w", "a", 8, 3600);
    // 15 min in: a is 120 GPU-min behind (2 GPUs over the 45 min left); b is as far ahead,
    // which alone would cut it by as much. Balanced: a 10 GPUs, b 6.
    assert_eq!(floor_gpus(&h, "a", T + 15 * MIN), 10.0);
    assert_eq!(floor_gpus(&h, "b", T + 15 * MIN), 6.0);
    // explain says so.
    let e = crate::domain::explain(&h.state, "w", T + 15 * MIN).unwrap();
    assert!(
        e.reason.ends_with(
            "; a holds 0 GPUs against a share floor of 10.0 this hour (its share, 8.0, raised \
             by the owed time it is behind this hour): it goes before every allocation at or \
             above its own"
        ),
        "{}",
        e.reason
    );
    // Off, the floors are the allocations' fractions.
    let mut off = two_on_two();
    off.state.set_hourly_floor(false);
    off.running(T - HOUR, "x1", "b", 600, &[("n0", 8)]);
    off.running(T - HOUR, "x2", "b", 600, &[("n1", 8)]);
    off.submit(T, "w", "a", 8, 3600);
    assert_eq!(floor_gpus(&off, "a", T + 15 * MIN), 8.0);
    assert!(off.state.hour_meter("a").is_none());
}

#[test]
fn cuts_never_exceed_raises() {
    let mut h = two_on_two();
    // b ran 12 GPUs all hour, 4 beyond its owed 8; a asked only for 1 GPU at 45 min and got
    // it at once, so nobody is behind: b keeps its floor.
    h.running(T - HOUR, "x1", "b", 600, &[("n0", 8)]);
    h.running(T - HOUR, "x2", "b", 600, &[("n1", 4)]);
    h.running(T + 45 * MIN, "s", "a", 600, &[("n1", 1)]);
    assert_eq!(floor_gpus(&h, "b", T + 50 * MIN), 8.0);
    assert_eq!(floor_gpus(&h, "a", T + 50 * MIN), 8.0);
}

#[test]
fn three_allocations_one_behind_two_ahead() {
    // Three allocations of equal share on three 8-GPU nodes: floors of 8 each. b and c have
    // held 12 GPUs each since before the hour (4 beyond their floors); a waits for 8 GPUs
    // from the hour's start.
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 1)]);
    for n in ["n0", "n1", "n2"] {
        h.node(n, 8);
    }
    h.running(T - HOUR, "b1", "b", 600, &[("n0", 8)]);
    h.running(T - HOUR, "b2", "b", 600, &[("n1", 4)]);
    h.running(T - HOUR, "c1", "c", 600, &[("n2", 8)]);
    h.running(T - HOUR, "c2", "c", 600, &[("n1", 4)]);
    h.submit(T, "w", "a", 8, 3600);
    // 20 min in: a is 160 GPU-min behind over the 40 min left, raised by 4; b and c are each
    // 80 GPU-min ahead, cut by 2 each: 4 in all, as much as the raise.
    assert_eq!(floor_gpus(&h, "a", T + 20 * MIN), 12.0);
    assert_eq!(floor_gpus(&h, "b", T + 20 * MIN), 6.0);
    assert_eq!(floor_gpus(&h, "c", T + 20 * MIN), 6.0);
    // 10 min in: a is 80 GPU-min behind over 50 min (1.6 GPUs: raised by 1); b and c are 40
    // ahead (0.8 each: less than a whole GPU), so nobody is cut.
    assert_eq!(floor_gpus(&h, "a", T + 10 * MIN), 9.0);
    assert_eq!(floor_gpus(&h, "b", T + 10 * MIN), 8.0);
    assert_eq!(floor_gpus(&h, "c", T + 10 * MIN), 8.0);
}

#[test]
fn cuts_beyond_the_raises_are_scaled_and_rounded_towards_zero() {
    // Raised by 3 against two cuts of 4 (8 in all): each scaled by 3/8 to 1.5, then 1.
    let mut shifts = vec![(0, 3 * MILLI), (1, -4 * MILLI), (2, -4 * MILLI)];
    balance(&mut shifts);
    assert_eq!(shifts, [(0, 3 * MILLI), (1, -MILLI), (2, -MILLI)]);
    // Nothing raised: every cut goes.
    let mut shifts = vec![(1, -4 * MILLI), (2, -2 * MILLI)];
    balance(&mut shifts);
    assert!(shifts.is_empty());
    // Cuts within the raises stand as they are.
    let mut shifts = vec![(0, 5 * MILLI), (1, -2 * MILLI), (2, -3 * MILLI)];
    balance(&mut shifts);
    assert_eq!(shifts, [(0, 5 * MILLI), (1, -2 * MILLI), (2, -3 * MILLI)]);
}

/// A run ordered off counts in its allocation's hour until its grace deadline, as accounting's
/// ledger counts it, however late its stop is folded (the preemption service down past the
/// deadline): while it waits, the reading leaves out the time since the deadline; once the
/// stop is folded, the meter gives that time back.
#[test]
fn a_run_ordered_off_counts_in_the_hour_until_its_grace_deadline() {
    let mut h = two_on_two();
    h.submit(T, "j1", "a", 4, 60);
    h.place(T, "j1", &[("n0", 4)]);
    h.start(T, "j1");
    // Two more of a's jobs wait all along: a is owed its whole floor of 8 GPUs.
    h.submit(T, "j2", "a", 8, 60);
    h.submit(T, "j3", "a", 8, 60);
    h.order_off(T + 5 * MIN, "j1", T + 10 * MIN);
    let reading = |minutes: u128| (4 * 10 * GPU_MIN, (4 * 10 + 16 * minutes) * GPU_MIN);
    assert_eq!(h.state.hour_metered("a", T + 40 * MIN), Some(reading(40)));
    // At 30 min a is owed 240 GPU-min and ran 40 (not 120): 200 behind over the 30 min
    // left, its floor raised by 6 whole GPUs (by 4 had j1 counted to 30 min).
    assert_eq!(floor_gpus(&h, "a", T + 30 * MIN), 14.0);
    // The kill reported at 50 min: the same reading, from the meter alone.
    h.ok(
        T + 50 * MIN,
        Body::JobPreempted(pb::JobPreempted {
            job_id: "j1".into(),
            killed: true,
        }),
    );
    let m = *h.state.hour_meter("a").unwrap();
    assert_eq!(m.at(T + 50 * MIN), reading(50));
    assert_eq!(h.state.hour_metered("a", T + 50 * MIN), Some(reading(50)));
}
