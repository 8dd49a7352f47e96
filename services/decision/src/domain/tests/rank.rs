//! Fair Tree rankings checked against hand-computed orders.

use std::cmp::Ordering;

use fairshare_events::pb;
use fairshare_model::budget::BudgetTree;
use proptest::prelude::*;

use super::support::{acc, leaf};
use crate::domain::rank::{FairTree, LeafUsage, cmp_ratio, fair_tree_order};

fn tree(accounts: Vec<pb::Account>) -> BudgetTree {
    BudgetTree::from_accounts(&accounts).unwrap()
}

fn usage(t: &BudgetTree, rows: &[(&str, u128, u128)]) -> Vec<LeafUsage> {
    let mut v = vec![LeafUsage::default(); t.accounts.len()];
    for (path, charged, allocated) in rows {
        let id = t
            .allocation(path)
            .unwrap_or_else(|| panic!("no leaf {path}"));
        v[id] = LeafUsage {
            charged_gpu_ms: *charged,
            allocated_gpu_ms: *allocated,
            held_gpus: 0,
        };
    }
    v
}

fn order(t: &BudgetTree, rows: &[(&str, u128, u128)]) -> Vec<String> {
    fair_tree_order(t, &usage(t, rows))
        .into_iter()
        .map(|id| t.accounts[id].path.clone())
        .collect()
}

#[test]
fn ratios_compare_exactly_beyond_128_bits() {
    // (2^128-1)/(2^128-2) = 1 + 1/(2^128-2) is below (2^128-2)/(2^128-3) = 1 + 1/(2^128-3);
    // both products overflow u128 and a float cannot tell the two apart.
    let m = u128::MAX;
    assert_eq!(cmp_ratio(m, m - 1, m - 1, m - 2), Ordering::Less);
    assert_eq!(cmp_ratio(m - 1, m - 2, m, m - 1), Ordering::Greater);
    assert_eq!(cmp_ratio(m, m, 1, 1), Ordering::Equal);
    assert_eq!(cmp_ratio(3, 9, 1, 3), Ordering::Equal);
    assert_eq!(cmp_ratio(1 << 100, 3, (1 << 100) + 1, 3), Ordering::Less);
}

#[test]
fn flat_tree_orders_by_usage_over_allocated_time() {
    let t = tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 2)]);
    // a: 50/100 = 0.5, b: 20/100 = 0.2, c: 60/200 = 0.3.
    assert_eq!(
        order(&t, &[("a", 50, 100), ("b", 20, 100), ("c", 60, 200)]),
        ["b", "c", "a"]
    );
}

#[test]
fn zero_usage_ties_break_by_name() {
    let t = tree(vec![leaf("zeta", 5), leaf("alpha", 1), leaf("mid", 3)]);
    assert_eq!(
        order(&t, &[("zeta", 0, 500), ("alpha", 0, 100), ("mid", 0, 300)]),
        ["alpha", "mid", "zeta"]
    );
    // No snapshot at all: every ratio is 0/0, the group falls back to usage/share, all zero.
    assert_eq!(order(&t, &[]), ["alpha", "mid", "zeta"]);
}

#[test]
fn equal_ratios_tie_by_name() {
    let t = tree(vec![leaf("b", 1), leaf("a", 2), leaf("c", 1)]);
    // a: 20/200 = b: 10/100 = 0.1 < c: 11/100.
    assert_eq!(
        order(&t, &[("a", 20, 200), ("b", 10, 100), ("c", 11, 100)]),
        ["a", "b", "c"]
    );
}

#[test]
fn share_zero_ranks_last_whatever_its_usage() {
    let t = tree(vec![
        leaf("guest2", 0),
        leaf("guest1", 0),
        leaf("busy", 1),
        leaf("idle", 1),
    ]);
    // busy is far over its share, the guests used nothing: guests still come last, ordered by
    // usage (guest2 used less), not name.
    assert_eq!(
        order(
            &t,
            &[
                ("busy", 900, 100),
                ("idle", 10, 100),
                ("guest1", 5, 0),
                ("guest2", 3, 0)
            ]
        ),
        ["idle", "busy", "guest2", "guest1"]
    );
}

#[test]
fn share_zero_subtree_is_ranked_inside_by_share() {
    // Everything under "lab" has fraction 0, so no allocated time: inside it the siblings
    // compare by usage / share: x 10/1 = 10 > y 15/3 = 5.
    let t = tree(vec![
        acc("lab", 0, vec![leaf("x", 1), leaf("y", 3)]),
        leaf("prod", 1),
    ]);
    assert_eq!(
        order(
            &t,
            &[("prod", 1000, 10), ("lab/x", 10, 0), ("lab/y", 15, 0)]
        ),
        ["prod", "lab/y", "lab/x"]
    );
}

#[test]
fn allocation_missing_from_the_snapshot_falls_back_to_shares_for_its_group() {
    // "new" is not in the snapshot (no allocated time). Its group compares usage/share:
    // old 30/1 = 30, new 0/1 = 0, so new first; inside "other" allocated time still counts.
    let t = tree(vec![
        acc("g", 1, vec![leaf("new", 1), leaf("old", 1)]),
        acc("other", 1, vec![leaf("p", 1), leaf("q", 3)]),
    ]);
    assert_eq!(
        order(
            &t,
            &[
                ("g/old", 30, 100),
                ("other/p", 10, 50),
                ("other/q", 10, 150),
            ]
        ),
        // Roots: g 30/100 = 0.3 vs other 20/200 = 0.1 -> other first; q 1/15 < p 1/5.
        ["other/q", "other/p", "g/new", "g/old"]
    );
}

#[test]
fn deep_tree_is_walked_depth_first() {
    // Five levels. Every leaf under a better-ranked node outranks every leaf under a worse one,
    // even when a leaf under the worse node has the lowest ratio of all.
    let t = tree(vec![
        acc(
            "org",
            1,
            vec![
                acc(
                    "p1",
                    1,
                    vec![acc(
                        "proj",
                        1,
                        vec![acc("team", 1, vec![leaf("x", 1), leaf("y", 1)])],
                    )],
                ),
                acc("p2", 1, vec![leaf("z", 1), leaf("w", 1)]),
            ],
        ),
        leaf("solo", 1),
    ]);
    let rows = [
        // org: (10+30+80+0)/(100+100+100+100) = 120/400 = 0.3; solo 50/400 = 0.125 -> solo first.
        ("solo", 50, 400),
        // p1: 40/200 = 0.2; p2: 80/200 = 0.4 -> p1 first although w (0/100) is the lowest leaf.
        ("org/p1/proj/team/x", 10, 100),
        ("org/p1/proj/team/y", 30, 100),
        ("org/p2/z", 80, 100),
        ("org/p2/w", 0, 100),
    ];
    assert_eq!(
        order(&t, &rows),
        [
            "solo",
            "org/p1/proj/team/x",
            "org/p1/proj/team/y",
            "org/p2/w",
            "org/p2/z"
        ]
    );
}

/// Slurm Fair Tree, computed by hand with Slurm's level fairshare LF = S / U, where S is the
/// share normalised over the siblings and U the usage normalised over the siblings' usage:
///
/// - root: A (40): S = 0.4, U = 200/700 -> LF 1.40; B (60): S = 0.6, U = 500/700 -> LF 0.84.
/// - A: a1 (1): S = 0.25, U = 0.5 -> 0.5; a2 (3): S = 0.75, U = 0.5 -> 1.5.
/// - B: b1 (1): S = 0.25, U = 0.6 -> 0.42; b2 (1): U = 0 -> infinite; b3 (2): S = 0.5,
///   U = 0.4 -> 1.25.
///
/// Sorted by LF descending at each level, depth first: a2, a1, b2, b3, b1. A flat sort of the
/// leaves by usage / fraction would put b2 first and a1 after b3: the tree matters.
#[test]
fn matches_slurm_fair_tree_when_every_account_has_its_own_share() {
    let t = tree(vec![
        acc("A", 40, vec![leaf("a1", 1), leaf("a2", 3)]),
        acc("B", 60, vec![leaf("b1", 1), leaf("b2", 1), leaf("b3", 2)]),
    ]);
    // Allocated time = fraction x 1000: a1 0.1, a2 0.3, b1 0.15, b2 0.15, b3 0.3.
    let rows = [
        ("A/a1", 100, 100),
        ("A/a2", 100, 300),
        ("B/b1", 300, 150),
        ("B/b2", 0, 150),
        ("B/b3", 200, 300),
    ];
    assert_eq!(order(&t, &rows), ["A/a2", "A/a1", "B/b2", "B/b3", "B/b1"]);
}

#[test]
fn charging_moves_an_account_past_its_siblings_and_up_the_tree() {
    let t = tree(vec![
        acc("A", 1, vec![leaf("a1", 1), leaf("a2", 1)]),
        acc("B", 1, vec![leaf("b1", 1)]),
    ]);
    let u = usage(
        &t,
        &[("A/a1", 0, 100), ("A/a2", 10, 100), ("B/b1", 15, 200)],
    );
    let mut f = FairTree::new(&t, &u);
    let path = |f: &FairTree<'_>| -> Vec<String> {
        f.leaf_order()
            .into_iter()
            .map(|id| t.accounts[id].path.clone())
            .collect()
    };
    // A 10/200 = 0.05 < B 15/200 = 0.075.
    assert_eq!(path(&f), ["A/a1", "A/a2", "B/b1"]);
    let a1 = t.allocation("A/a1").unwrap();
    // a1 now 11/100 > a2 10/100; A 21/200 > B 15/200.
    f.charge(a1, 11);
    assert_eq!(path(&f), ["B/b1", "A/a2", "A/a1"]);
    assert_eq!(f.used(t.allocation("A/a1").unwrap()), 11);
    assert_eq!(f.used(0), 21);
}

#[test]
fn a_leaf_with_no_jobs_is_skipped_without_reordering() {
    let t = tree(vec![
        acc("A", 1, vec![leaf("empty", 1), leaf("busy", 1)]),
        leaf("B", 1),
    ]);
    let u = usage(
        &t,
        &[("A/empty", 0, 100), ("A/busy", 50, 100), ("B", 80, 200)],
    );
    let mut f = FairTree::new(&t, &u);
    let busy = t.allocation("A/busy").unwrap();
    let b = t.allocation("B").unwrap();
    // Only busy and B have work; empty ranks first but is never offered; A (50/200) before B.
    f.set_pending(busy);
    f.set_pending(b);
    assert_eq!(f.next_pending_leaf(), Some(busy));
    f.exhaust(busy);
    assert_eq!(f.next_pending_leaf(), Some(b));
    f.exhaust(b);
    assert_eq!(f.next_pending_leaf(), None);
    let order: Vec<_> = f.leaf_order();
    assert_eq!(order[0], t.allocation("A/empty").unwrap());
}

fn arb_tree() -> impl Strategy<Value = Vec<pb::Account>> {
    // Up to three levels of up to four children, shares 0..4.
    proptest::collection::vec(
        (
            0u64..4,
            proptest::collection::vec((0u64..4, proptest::collection::vec(0u64..4, 0..4)), 0..4),
        ),
        1..4,
    )
    .prop_map(|top| {
        top.into_iter()
            .enumerate()
            .map(|(i, (share, mids))| {
                let children = mids
                    .into_iter()
                    .enumerate()
                    .map(|(j, (ms, leaves))| {
                        let kids = leaves
                            .into_iter()
                            .enumerate()
                            .map(|(k, ls)| leaf(&format!("l{k}"), ls))
                            .collect();
                        acc(&format!("m{j}"), ms, kids)
                    })
                    .collect();
                acc(&format!("t{i}"), share, children)
            })
            .collect()
    })
}

/// The ancestors-or-self of `a` and `b` that are siblings, if neither contains the other.
fn parting(t: &BudgetTree, a: usize, b: usize) -> Option<(usize, usize)> {
    let up =
        |x: usize| std::iter::successors(Some(x), |&i| t.accounts[i].parent).collect::<Vec<_>>();
    let (pa, pb) = (up(a), up(b));
    pa.iter().find_map(|&x| {
        let parent = t.accounts[x].parent;
        pb.iter()
            .find(|&&y| y != x && t.accounts[y].parent == parent)
            .map(|&y| (x, y))
    })
}

proptest! {
    /// Reading the order a charge would make off the uncharged ranking, at the siblings where
    /// two leaves' paths part, agrees with charging a copy and listing its leaves.
    #[test]
    fn charged_sibling_order_equals_charging_a_copy(
        accounts in arb_tree(),
        seed in proptest::collection::vec((0u128..50, 0u128..50), 64),
        pick in 0usize..64,
        charge in 0u128..60,
    ) {
        let t = tree(accounts);
        let leaves: Vec<usize> = (0..t.accounts.len()).filter(|&i| t.accounts[i].is_allocation()).collect();
        let mut u = vec![LeafUsage::default(); t.accounts.len()];
        for &id in &leaves {
            u[id] = LeafUsage { charged_gpu_ms: seed[id % 64].0, allocated_gpu_ms: seed[id % 64].1, ..Default::default() };
        }
        let base = FairTree::new(&t, &u);
        let a = leaves[pick % leaves.len()];
        let mut charged = base.clone();
        charged.charge(a, charge);
        let order = charged.leaf_order();
        let pos = |x: usize| order.iter().position(|&y| y == x).unwrap();
        for &v in leaves.iter().filter(|&&v| v != a) {
            let (sa, sv) = parting(&t, a, v).unwrap();
            let before = base.cmp_siblings_charged(sa, sv, charge) == Ordering::Less;
            prop_assert_eq!(before, pos(a) < pos(v), "{} vs {}", a, v);
        }
    }

    /// Incremental re-ranking after any sequence of charges equals ranking from scratch with
    /// the charged usage; and the next pending leaf is the first pending leaf in that order.
    #[test]
    fn incremental_charges_equal_a_full_re_sort(
        accounts in arb_tree(),
        seed in proptest::collection::vec((0u128..50, 0u128..50), 64),
        charges in proptest::collection::vec((0usize..64, 1u128..40), 0..30),
        pending in proptest::collection::vec(any::<bool>(), 64),
    ) {
        let t = tree(accounts);
        let leaves: Vec<usize> = (0..t.accounts.len()).filter(|&i| t.accounts[i].is_allocation()).collect();
        let mut u = vec![LeafUsage::default(); t.accounts.len()];
        for &id in &leaves {
            u[id] = LeafUsage { charged_gpu_ms: seed[id % 64].0, allocated_gpu_ms: seed[id % 64].1, ..Default::default() };
        }
        let mut f = FairTree::new(&t, &u);
        for &id in &leaves {
            if pending[id % 64] { f.set_pending(id); }
        }
        for (pick, amount) in charges {
            let id = leaves[pick % leaves.len()];
            f.charge(id, amount);
            u[id].charged_gpu_ms += amount;
            let fresh = fair_tree_order(&t, &u);
            prop_assert_eq!(f.leaf_order(), fresh.clone());
            let expected = fresh.into_iter().find(|&id| pending[id % 64]);
            prop_assert_eq!(f.next_pending_leaf(), expected);
        }
    }
}

#[test]
fn the_share_floor_serves_allocations_below_it_first_and_stops_once_they_reach_it() {
    // 10 GPUs: floors a 2.5, b 2.5, c 5. Window order a (0), c (10/200), b (90/100).
    let t = tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 2)]);
    let mut u = usage(&t, &[("a", 0, 100), ("b", 90, 100), ("c", 10, 200)]);
    let (a, b, c) = (
        t.allocation("a").unwrap(),
        t.allocation("b").unwrap(),
        t.allocation("c").unwrap(),
    );
    u[a].held_gpus = 3;
    u[b].held_gpus = 2;
    u[c].held_gpus = 5;
    let mut f = FairTree::new(&t, &u).with_floor(&u, 10);
    assert!(!f.below_floor(a) && f.below_floor(b) && !f.below_floor(c));
    // Held minus floor, over the floor's denominator (floors 10/4, 10/4, 20/4).
    let excess = |f: &FairTree<'_>, id| f.floor_standing(id).unwrap().excess();
    assert_eq!((excess(&f, a), excess(&f, b), excess(&f, c)), (2, -2, 0));
    for id in [a, b, c] {
        f.set_pending(id);
    }
    // b, worst by the window, is the only one below its floor: it goes first...
    assert_eq!(f.next_pending_leaf(), Some(b));
    // ...until one more GPU takes it to 3 >= 2.5; then the window order again.
    f.hold(b, 1);
    assert!(!f.below_floor(b));
    assert_eq!(f.next_pending_leaf(), Some(a));
    f.exhaust(a);
    assert_eq!(f.next_pending_leaf(), Some(c));
    // The floor only orders: the window ranking itself is untouched.
    assert_eq!(f.leaf_order(), [a, c, b]);
    // Without the floor, nobody is below it.
    let plain = FairTree::new(&t, &u);
    assert!(!plain.below_floor(b) && plain.floor_standing(b).is_none());
}

proptest! {
    // Each case folds up to 40 jobs into a fresh state: fewer cases than the default.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Ranking inputs read through the in-flight index (GPU totals plus the runs started
    /// lately) equal charging every run one by one, whatever started, stopped, was ordered
    /// off or ended, at any time after the snapshot's window end.
    #[test]
    fn ranking_inputs_from_the_flight_index_equal_charging_run_by_run(
        jobs in proptest::collection::vec(
            (0usize..3, 1u32..=8, 0i64..3_000, 1i64..2_000, 0u8..4),
            1..40,
        ),
        window_end in 0i64..4_000,
        later in proptest::collection::vec(0i64..5_000, 1..6),
    ) {
        use super::support::H;
        use crate::domain::rank::{leaf_usage, leaf_usage_by_run};
        const S: i64 = 1_000;
        let allocations = ["org/a", "org/b", "other"];
        let mut h = H::new();
        h.tree(vec![acc("org", 3, vec![leaf("a", 1), leaf("b", 2)]), leaf("other", 1)]);
        for n in 0..40 {
            h.node(&format!("n{n:02}"), 8);
        }
        let mut sorted = jobs.clone();
        sorted.sort_by_key(|j| j.2);
        for (i, (a, gpus, start_s, min_runtime_s, fate)) in sorted.into_iter().enumerate() {
            let id = format!("j{i:02}");
            h.running(start_s * S, &id, allocations[a], min_runtime_s, &[(&format!("n{i:02}"), gpus)]);
            match fate {
                // Ordered off: its GPUs no longer count towards its allocation's floor.
                1 => h.ok(start_s * S + 1, pb::event::Body::PreemptionOrdered(pb::PreemptionOrdered {
                    job_id: id.clone(),
                    grace_deadline_ms: start_s * S + 30 * S,
                    ..Default::default()
                })),
                // Ended: out of flight.
                2 => h.ok(start_s * S + 2, pb::event::Body::JobFinished(pb::JobFinished {
                    job_id: id.clone(),
                    exit_code: 0,
                })),
                _ => {}
            }
        }
        h.snapshot(window_end * S, &[("org/a", 5, 100), ("org/b", 7, 200), ("other", 1, 50)]);
        let tree = h.state.budget_tree().unwrap();
        for l in later {
            let now = (window_end + l) * S;
            prop_assert_eq!(leaf_usage(&h.state, tree, now), leaf_usage_by_run(&h.state, tree, now));
        }
    }
}

/// A run that ended since the snapshot's window end is charged what it ran beyond the window
/// end until a snapshot covers its end, as the runs still in flight are: between two
/// snapshots (or while the accounting service is down) finishing work must not make an
/// allocation look less served than while it ran.
#[test]
fn a_run_ended_since_the_snapshot_is_charged_until_a_snapshot_covers_it() {
    use super::support::H;
    use crate::domain::rank::{leaf_usage, leaf_usage_by_run};
    const HOUR: i64 = 3_600_000;
    let finished = |id: &str| {
        pb::event::Body::JobFinished(pb::JobFinished {
            job_id: id.into(),
            exit_code: 0,
        })
    };
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    let t0 = 10 * HOUR;
    h.running(t0, "a1", "a", 60, &[("n0", 4)]);
    // Ended before the snapshot's window end: in the snapshot, nothing beyond it.
    h.running(t0, "a2", "a", 60, &[("n0", 2)]);
    h.ok(t0 + HOUR / 2, finished("a2"));
    let allocated = 1_000 * HOUR as u64;
    let in_snapshot = 5 * HOUR as u64;
    h.snapshot(
        t0 + HOUR,
        &[("a", in_snapshot, allocated), ("b", 0, allocated)],
    );
    h.ok(t0 + 2 * HOUR, finished("a1"));
    let tree = h.state.budget_tree().unwrap();
    let a = tree.allocation("a").unwrap();
    let now = t0 + 3 * HOUR;
    let usage = leaf_usage(&h.state, tree, now);
    // 4 GPUs from the window end (t0 + 1 h) to the end (t0 + 2 h), nothing after.
    assert_eq!(
        usage[a].charged_gpu_ms,
        u128::from(in_snapshot) + 4 * HOUR as u128
    );
    assert_eq!(usage, leaf_usage_by_run(&h.state, tree, now));

    // A snapshot through the end covers it: its rows alone.
    let covered = 9 * HOUR as u64;
    h.snapshot(
        t0 + 3 * HOUR,
        &[("a", covered, allocated), ("b", 0, allocated)],
    );
    let tree = h.state.budget_tree().unwrap();
    let usage = leaf_usage(&h.state, tree, now);
    assert_eq!(usage[a].charged_gpu_ms, u128::from(covered));
}

/// An ended run leaves the ranking's record when a snapshot covers its end by the log (a
/// window ending before the run did, through its sequence) or by time (a window ending after
/// it, through an earlier sequence), and not before; beside a run still in flight, charging
/// run by run agrees.
#[test]
fn an_ended_run_is_dropped_once_a_snapshot_covers_it_by_the_log_or_by_time() {
    use super::support::H;
    use crate::domain::rank::{leaf_usage, leaf_usage_by_run};
    const HOUR: i64 = 3_600_000;
    let allocated = 1_000 * HOUR as u64;
    let snapshot = |window_end_ms: i64, through_sequence: u64| {
        pb::event::Body::UsageSnapshot(pb::UsageSnapshot {
            cluster: super::support::CLUSTER.into(),
            window_end_ms,
            window_ms: 7 * 24 * HOUR,
            through_sequence,
            allocations: vec![pb::AllocationUsage {
                allocation: "a".into(),
                charged_gpu_ms: 0,
                allocated_gpu_ms: allocated,
            }],
            unallocated_gpu_ms: 0,
        })
    };
    let finished = pb::event::Body::JobFinished(pb::JobFinished {
        job_id: "a1".into(),
        exit_code: 0,
    });
    let t0 = 10 * HOUR;
    let charged = |h: &H, now: i64| {
        let tree = h.state.budget_tree().unwrap();
        let usage = leaf_usage(&h.state, tree, now);
        assert_eq!(usage, leaf_usage_by_run(&h.state, tree, now));
        usage[tree.allocation("a").unwrap()].charged_gpu_ms
    };
    // Each case: a1 (4 GPUs) ends at t0 + 2 h; a3 (1 GPU, minimum runtime 60 s) runs on.
    let ended = || {
        let mut h = H::new();
        h.tree(vec![leaf("a", 1), leaf("b", 1)]);
        h.node("n0", 8);
        h.running(t0, "a1", "a", 60, &[("n0", 4)]);
        h.running(t0, "a3", "a", 60, &[("n0", 1)]);
        h.ok(t0 + HOUR, snapshot(t0 + HOUR, h.seq));
        h.ok(t0 + 2 * HOUR, finished.clone());
        h
    };
    let now = t0 + 3 * HOUR;
    let mut h = ended();
    let before = h.seq - 1;
    // a1 4 GPUs x 1 h past the window end, a3 1 GPU x 2 h.
    assert_eq!(charged(&h, now), (4 * HOUR + 2 * HOUR) as u128);

    // A window ending before the run did, but through its end: covered by the log.
    h.ok(t0 + HOUR + HOUR / 2, snapshot(t0 + HOUR + HOUR / 2, h.seq));
    assert!(h.state.ended.is_empty());
    assert_eq!(charged(&h, now), (HOUR + HOUR / 2) as u128);

    // A window ending after the run did (a clock ahead), through an earlier sequence: covered
    // by time.
    let mut h = ended();
    h.ok(t0 + 2 * HOUR + 1, snapshot(t0 + 2 * HOUR + 1, before));
    assert!(h.state.ended.is_empty());

    // Neither: kept.
    let mut h = ended();
    h.ok(t0 + HOUR + 1, snapshot(t0 + HOUR + 1, before));
    assert_eq!(h.state.ended.len(), 1);
    assert_eq!(charged(&h, now), (4 * (HOUR - 1) + 2 * HOUR - 1) as u128);
}

const HOUR: i64 = 3_600_000;

/// Allocations `a` and `b` on one 8-GPU node; `a1` (4 GPUs of `a`) running from `t0` (10 h), and
/// a usage snapshot ending an hour later: the harness and `t0`.
fn a1_running_past_a_snapshot() -> (super::support::H, i64) {
    let mut h = super::support::H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    let t0 = 10 * HOUR;
    h.running(t0, "a1", "a", 60, &[("n0", 4)]);
    h.snapshot(t0 + HOUR, &[("a", 0, 1000), ("b", 0, 1000)]);
    (h, t0)
}

/// A run ordered off is charged up to its grace deadline at the latest, as accounting charges
/// it, however late its stop is reported (the preemption service down past the deadline).
#[test]
fn an_ended_run_ordered_off_is_charged_to_its_deadline_at_most() {
    use crate::domain::rank::leaf_usage;
    let (mut h, t0) = a1_running_past_a_snapshot();
    h.order_off(t0 + HOUR + 60_000, "a1", t0 + HOUR + 90_000);
    h.ok(
        t0 + 2 * HOUR,
        pb::event::Body::JobPreempted(pb::JobPreempted {
            job_id: "a1".into(),
            killed: true,
        }),
    );
    let tree = h.state.budget_tree().unwrap();
    let usage = leaf_usage(&h.state, tree, t0 + 3 * HOUR);
    assert_eq!(
        usage[tree.allocation("a").unwrap()].charged_gpu_ms,
        4 * 90_000
    );
}

/// A run ordered off whose stop is not reported yet is charged to its grace deadline at most,
/// as accounting charges it, whether it started before the snapshot's window end (charged in
/// bulk) or after (charged run by run).
#[test]
fn a_run_ordered_off_is_charged_to_its_deadline_at_most_while_its_stop_is_unreported() {
    use crate::domain::rank::{leaf_usage, leaf_usage_by_run};
    let (mut h, t0) = a1_running_past_a_snapshot();
    h.running(t0 + HOUR + 60_000, "a2", "a", 60, &[("n0", 2)]);
    h.order_off(t0 + 2 * HOUR, "a1", t0 + 2 * HOUR + 30_000);
    h.order_off(t0 + 2 * HOUR, "a2", t0 + 2 * HOUR + 30_000);
    let tree = h.state.budget_tree().unwrap();
    let now = t0 + 5 * HOUR;
    let usage = leaf_usage(&h.state, tree, now);
    assert_eq!(usage, leaf_usage_by_run(&h.state, tree, now));
    // a1 from the window end, a2 from its start, both to the deadline.
    let a1 = 4 * (HOUR + 30_000);
    let a2 = 2 * (HOUR - 60_000 + 30_000);
    assert_eq!(
        usage[tree.allocation("a").unwrap()].charged_gpu_ms,
        (a1 + a2) as u128
    );
}
