//! Placement scenarios with hand-computed outcomes.

use fairshare_events::pb::{self, event::Body};

use super::support::{CLUSTER, H, HOUR, MIN, leaf, placed, placed_ids, reason, reason_text};
use crate::domain::{Ignored, NodeGpus, WaitReason};

const NOW: i64 = 100 * HOUR;

fn nodes(h: &mut H, names: &[&str], gpus: u32) {
    for n in names {
        h.node(n, gpus);
    }
}

fn p(id: &str, nodes: &[(&str, u32)]) -> (String, Vec<(String, u32)>) {
    (
        id.to_string(),
        nodes.iter().map(|(n, g)| (n.to_string(), *g)).collect(),
    )
}

#[test]
fn best_fit_keeps_whole_nodes_free_for_large_jobs() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    nodes(&mut h, &["n0", "n1", "n2"], 8);
    h.running(NOW - HOUR, "r0", "a", 4 * 3600, &[("n0", 3)]);
    h.running(NOW - HOUR, "r2", "a", 4 * 3600, &[("n2", 6)]);
    h.submit_full(NOW - 10, "j2", "a", 1, 2, 3600, 3, true);
    h.submit_full(NOW - 10, "j4", "a", 1, 4, 3600, 2, true);
    h.submit_full(NOW - 10, "j8", "a", 1, 8, 3600, 1, true);
    let d = h.decide(NOW);
    // j2 fits n2 exactly (2 free); j4 goes to n0 (5 free, 1 left) rather than opening n1; so
    // n1 stays whole for j8. First fit by name would put j2 on n0 and j4 on n1 and strand j8.
    assert_eq!(
        placed(&d),
        [
            p("j2", &[("n2", 2)]),
            p("j4", &[("n0", 4)]),
            p("j8", &[("n1", 8)])
        ]
    );
    assert!(d.waiting.is_empty());
}

#[test]
fn single_gpu_jobs_are_packed_onto_one_node() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    for i in 0..8 {
        h.submit_full(NOW - 100 + i, &format!("s{i}"), "a", 1, 1, 900, 5, true);
    }
    h.submit_full(NOW - 100, "big", "a", 1, 8, 3600, 1, true);
    let d = h.decide(NOW);
    let mut expected: Vec<_> = (0..8).map(|i| p(&format!("s{i}"), &[("n0", 1)])).collect();
    expected.push(p("big", &[("n1", 8)]));
    assert_eq!(placed(&d), expected);
}

#[test]
fn equal_fit_prefers_a_node_already_in_use() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    h.node("n0", 4);
    h.node("n1", 8);
    h.running(NOW - HOUR, "r", "a", 3600, &[("n1", 4)]);
    h.submit(NOW - 10, "j", "a", 4, 3600);
    let d = h.decide(NOW);
    // Both have 4 free; n1 is already in use, so the 4-GPU node stays whole.
    assert_eq!(placed(&d), [p("j", &[("n1", 4)])]);
}

#[test]
fn multi_node_jobs_take_whole_nodes_and_hold_the_reservation() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    nodes(&mut h, &["n0", "n1", "n2", "n3"], 8);
    // 1 GPU busy on n1 until NOW + 30 min.
    h.running(NOW - 30 * MIN, "r", "a", 3600, &[("n1", 1)]);
    h.submit_full(NOW - 50, "m2", "a", 2, 8, 3600, 10, true);
    h.submit_full(NOW - 50, "m3", "a", 3, 8, 3600, 9, true);
    h.submit_full(NOW - 50, "long", "a", 1, 1, 2 * 3600, 5, true);
    h.submit_full(NOW - 50, "short", "a", 1, 1, 1800, 4, true);
    h.submit_full(NOW - 50, "u", "a", 1, 1, 0, 0, true);
    let d = h.decide(NOW);
    // m2 takes the two lowest wholly free nodes. m3 needs three whole nodes: n3 is free now,
    // n1 at NOW+30m, n0 and n2 (just given to m2) at NOW+1h; the third earliest (n0, lower
    // name than n2) sets the start at NOW+1h. n1 and n3 are reserved from then with nothing
    // spare: "long" (protected until NOW+2h) may use neither; nor may "short", although its
    // protection ends at NOW+30m: it is m3's own allocation's work, which nothing would order
    // off for m3. Unallocated "u" may, and best fit puts it on the partly used n1.
    assert_eq!(
        placed(&d),
        [p("m2", &[("n0", 8), ("n2", 8)]), p("u", &[("n1", 1)])]
    );
    assert_eq!(reason(&d, "short"), "blocked_by_reservation");
    let r = d.reservation.as_ref().unwrap();
    assert_eq!(r.job_id, "m3");
    assert_eq!(r.start_ms, NOW + HOUR);
    let names: Vec<&str> = r.nodes.iter().map(|n| n.node).collect();
    assert_eq!(names, ["n0", "n1", "n3"]);
    assert!(r.nodes.iter().all(|n| n.gpus == 8));
    assert_eq!(reason(&d, "m3"), "reservation_pending");
    assert_eq!(reason(&d, "long"), "blocked_by_reservation");
    assert_eq!(d.waiting.len(), 3);
}

/// Allocations a and b on n0 and n1 (8 GPUs): b's running work holds 4 GPUs of n0 protected
/// until NOW+1h and all of n1 until NOW+3h, and b has used far more; a's "big" (8 GPUs)
/// waits, and will reserve n0 from NOW+1h.
fn big_reserving_n0() -> H {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    // b's running work: 4 GPUs on n0 protected until NOW+1h, all of n1 until NOW+3h.
    h.running(NOW - 30 * MIN, "r1", "b", 90 * 60, &[("n0", 4)]);
    h.running(NOW - HOUR, "r3", "b", 4 * 3600, &[("n1", 8)]);
    h.snapshot(
        NOW,
        &[
            ("a", 0, 1000 * HOUR as u64),
            ("b", 50 * HOUR as u64, 1000 * HOUR as u64),
        ],
    );
    h.submit(NOW - 100, "big", "a", 8, 3600);
    h
}

#[test]
fn reservation_lets_work_ending_before_its_start_backfill_and_not_longer_work() {
    let mut h = big_reserving_n0();
    // In b: "long" is first in queue order but is protected until NOW+2h, after the
    // reservation's start; "short" ends at NOW+30m, before it.
    h.submit_full(NOW - 90, "long", "b", 1, 2, 2 * 3600, 2, true);
    h.submit_full(NOW - 90, "short", "b", 1, 2, 30 * 60, 1, true);
    h.submit_full(NOW - 90, "u", "b", 1, 2, 0, 0, true);
    let d = h.decide(NOW);
    assert_eq!(d.ranking, ["a", "b"]);
    let r = d.reservation.as_ref().unwrap();
    assert_eq!(
        (r.job_id, r.start_ms, r.nodes.clone()),
        (
            "big",
            NOW + HOUR,
            vec![NodeGpus {
                node: "n0",
                gpus: 8
            }]
        )
    );
    assert_eq!(placed(&d), [p("short", &[("n0", 2)]), p("u", &[("n0", 2)])]);
    assert_eq!(reason(&d, "big"), "reservation_pending");
    assert_eq!(
        d.waiting
            .iter()
            .find(|w| w.job_id == "long")
            .map(|w| w.reason),
        Some(WaitReason::BlockedByReservation {
            reserved_for: "big",
            start_ms: NOW + HOUR,
            same_allocation: false
        })
    );
}

#[test]
fn the_reserved_jobs_own_allocation_backfills_only_what_the_reservation_leaves_spare() {
    let mut h = big_reserving_n0();
    // Short work of a's own: its protection ends before the reservation's start, but nothing
    // would order it off for "big" then (the preemption service takes an allocation's work
    // for its own waiter only under a debug allowance).
    h.submit_full(NOW - 90, "a-short", "a", 1, 2, 30 * 60, 0, true);
    // The same of b's, and a's unallocated work: both may be ordered off for "big".
    h.submit_full(NOW - 90, "b-short", "b", 1, 2, 30 * 60, 0, true);
    h.submit_full(NOW - 90, "a-free", "a", 1, 2, 0, 0, true);
    let d = h.decide(NOW);
    let r = d.reservation.as_ref().unwrap();
    assert_eq!((r.job_id, r.start_ms), ("big", NOW + HOUR));
    assert_eq!(
        placed(&d),
        [p("b-short", &[("n0", 2)]), p("a-free", &[("n0", 2)])]
    );
    assert_eq!(reason(&d, "a-short"), "blocked_by_reservation");
    // Said so: its minimum runtime ends before the reservation's start, so the common words
    // ("its minimum runtime ends later") would be false.
    let said = d
        .waiting
        .iter()
        .find(|w| w.job_id == "a-short")
        .map(|w| w.reason.to_string())
        .unwrap();
    assert!(
        said.contains("reserved for job big of its own allocation")
            && said.contains("whatever its minimum runtime")
            && !said.contains("ends later"),
        "{said}"
    );
}

#[test]
fn a_job_only_cordoned_nodes_could_hold_is_said_to_wait_for_them_whatever_is_free() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1", "n2"], 8);
    // n2 is cordoned and still busy; n0 is free, n1 busy.
    h.running(NOW - HOUR, "r1", "b", 3 * 3600, &[("n1", 8)]);
    h.running(NOW - HOUR, "r2", "b", 3 * 3600, &[("n2", 8)]);
    h.cordon("n2");
    h.submit_full(NOW - 10, "wide", "a", 3, 8, 3600, 0, true);
    let d = h.decide(NOW);
    assert!(d.reservation.is_none());
    assert_eq!(reason(&d, "wide"), "nodes_cordoned");
}

#[test]
fn the_most_free_on_a_node_counts_nodes_with_maintenance_ahead() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    h.running(NOW - HOUR, "r0", "b", 3 * 3600, &[("n0", 6)]);
    h.running(NOW - HOUR, "r1", "b", 3 * 3600, &[("n1", 2)]);
    // n1 (6 GPUs free) closes for maintenance in a week.
    h.maintenance(
        NOW - HOUR,
        &["n1"],
        NOW + 7 * 24 * HOUR,
        NOW + 8 * 24 * HOUR,
    );
    h.submit_full(NOW - 10, "top", "a", 1, 8, 3600, 1, true);
    h.submit_full(NOW - 10, "big", "a", 1, 8, 3600, 0, true);
    let d = h.decide(NOW);
    assert_eq!(reason(&d, "top"), "reservation_pending");
    let big = d.waiting.iter().find(|w| w.job_id == "big").unwrap();
    assert_eq!(
        big.reason,
        WaitReason::TooLargeForFreeNodes {
            nodes: 1,
            gpus_per_node: 8,
            largest_free: 6
        }
    );
}

#[test]
fn a_multi_node_job_too_big_for_the_free_nodes_is_not_said_to_be_blocked_by_the_reservation() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1", "n2", "n3", "n4", "n5"], 8);
    // n0 is free; n1 frees at NOW+1h; n2 to n5 have 4 GPUs free each until NOW+3h: 24 GPUs
    // free in all, but one whole node.
    h.running(NOW - HOUR, "r1", "b", 2 * 3600, &[("n1", 8)]);
    for n in ["n2", "n3", "n4", "n5"] {
        h.running(NOW - HOUR, &format!("r-{n}"), "b", 4 * 3600, &[(n, 4)]);
    }
    h.snapshot(
        NOW,
        &[
            ("a", 0, 1000 * HOUR as u64),
            ("b", 50 * HOUR as u64, 1000 * HOUR as u64),
        ],
    );
    // `big` (2 nodes) reserves n0 and n1 from NOW+1h; `wide` needs 3 whole nodes and only n0
    // is wholly free: the reservation is not what keeps it waiting.
    h.submit_full(NOW - 100, "big", "a", 2, 8, 3600, 0, true);
    h.submit_full(NOW - 90, "wide", "b", 3, 8, 2 * 3600, 0, true);
    let d = h.decide(NOW);
    let r = d.reservation.as_ref().unwrap();
    assert_eq!((r.job_id, r.start_ms), ("big", NOW + HOUR));
    let wide = d.waiting.iter().find(|w| w.job_id == "wide").unwrap();
    assert!(
        !matches!(wide.reason, WaitReason::BlockedByReservation { .. }),
        "{:?}",
        wide.reason
    );
}

#[test]
fn a_multi_node_reservation_leaves_out_a_node_whose_window_comes_too_soon_for_the_shared_start() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1", "n2"], 8);
    // n0 is free now but closes for maintenance at NOW+2h; n1 frees at NOW+90m, n2 at
    // NOW+100m.
    h.maintenance(NOW - HOUR, &["n0"], NOW + 2 * HOUR, NOW + 3 * HOUR);
    h.running(NOW - 30 * MIN, "r1", "b", 2 * 3600, &[("n1", 8)]);
    h.running(NOW - 20 * MIN, "r2", "b", 2 * 3600, &[("n2", 8)]);
    // Two whole nodes for 1 h: from NOW+90m on n0 and n1 it would run into n0's window, so it
    // is n1 and n2 from NOW+100m.
    h.submit_full(NOW - 100, "big", "a", 2, 8, 3600, 0, true);
    let d = h.decide(NOW);
    let r = d.reservation.as_ref().unwrap();
    let nodes: Vec<&str> = r.nodes.iter().map(|n| n.node).collect();
    assert_eq!((r.start_ms, nodes), (NOW + 100 * MIN, vec!["n1", "n2"]));
}

#[test]
fn reserved_nodes_names_the_nodes_the_cycle_reserves() {
    use crate::domain::reserve::reserved_nodes;
    use fairshare_model::shape::Shape;
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1", "n2"], 8);
    // b's work: n0 protected until NOW+1h on 4 GPUs, n1 until NOW+3h, n2 until NOW+2h.
    h.running(NOW - 30 * MIN, "r0", "b", 90 * 60, &[("n0", 4)]);
    h.running(NOW - HOUR, "r1", "b", 4 * 3600, &[("n1", 8)]);
    h.running(NOW - HOUR, "r2", "b", 3 * 3600, &[("n2", 6)]);
    h.submit(NOW - 100, "big", "a", 8, 3600);
    let d = h.decide(NOW);
    let reserved: Vec<&str> = d
        .reservation
        .as_ref()
        .unwrap()
        .nodes
        .iter()
        .map(|n| n.node)
        .collect();
    assert_eq!(reserved, ["n0"]);
    let one_node = Shape {
        nodes: 1,
        gpus_per_node: 8,
    };
    assert_eq!(reserved_nodes(&h.state, "x", one_node, HOUR, NOW), reserved);
    // Two whole nodes: the two that free first (n0 at NOW+1h, n2 at NOW+2h).
    let two_nodes = Shape {
        nodes: 2,
        gpus_per_node: 8,
    };
    assert_eq!(
        reserved_nodes(&h.state, "x", two_nodes, HOUR, NOW),
        ["n0", "n2"]
    );
    // Nothing could ever hold three 16-GPU nodes here.
    let too_big = Shape {
        nodes: 3,
        gpus_per_node: 16,
    };
    assert!(reserved_nodes(&h.state, "x", too_big, HOUR, NOW).is_empty());
}

#[test]
fn long_work_may_use_a_reserved_node_s_spare_gpus() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    h.running(NOW - 30 * MIN, "r1", "b", 90 * 60, &[("n0", 6)]);
    h.snapshot(NOW, &[("a", 0, 1000), ("b", 500, 1000)]);
    h.submit(NOW - 100, "top", "a", 4, 3600);
    h.submit(NOW - 90, "long", "b", 2, 4 * 3600);
    let d = h.decide(NOW);
    // At NOW+1h r1 is reclaimable and n0 has 8 free: 4 reserved for "top", 4 spare, so the
    // 2-GPU job protected for 4 h may take the 2 GPUs free now without delaying "top".
    let r = d.reservation.as_ref().unwrap();
    assert_eq!((r.job_id, r.start_ms), ("top", NOW + HOUR));
    assert_eq!(placed(&d), [p("long", &[("n0", 2)])]);
}

#[test]
fn cordoned_nodes_take_nothing_and_hold_no_reservation() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    h.cordon("n0");
    h.running(NOW - HOUR, "r", "a", 3 * 3600, &[("n1", 4)]);
    h.submit_full(NOW - 10, "j2", "a", 1, 2, 3600, 3, true);
    h.submit_full(NOW - 10, "big1", "a", 1, 8, 3600, 2, true);
    h.submit_full(NOW - 10, "big2", "a", 1, 8, 3600, 1, true);
    h.submit_full(NOW - 10, "u", "a", 1, 8, 0, 0, true);
    let d = h.decide(NOW);
    // j2 goes to n1 although n0 has more room; big1 is reserved on n1 (free once r's
    // protection ends at NOW+2h), never on the cordoned n0.
    assert_eq!(placed(&d), [p("j2", &[("n1", 2)])]);
    let r = d.reservation.as_ref().unwrap();
    assert_eq!((r.job_id, r.start_ms), ("big1", NOW + 2 * HOUR));
    assert_eq!(r.nodes[0].node, "n1");
    assert_eq!(reason(&d, "big2"), "nodes_cordoned");
    assert_eq!(reason(&d, "u"), "nodes_cordoned");
    assert_eq!(
        d.waiting
            .iter()
            .find(|w| w.job_id == "big2")
            .map(|w| w.reason.to_string())
            .as_deref(),
        Some("would fit only on cordoned nodes")
    );
}

#[test]
fn maintenance_accepts_only_work_protected_until_its_start() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    h.maintenance(NOW - HOUR, &["n0"], NOW + HOUR, NOW + 3 * HOUR);
    h.running(NOW - HOUR, "r", "a", 6 * 3600, &[("n1", 6)]);
    h.submit_full(NOW - 10, "big", "a", 1, 8, 2 * 3600, 9, true);
    h.submit_full(NOW - 10, "long", "a", 1, 4, 2 * 3600, 8, true);
    // Of another allocation, so the reservation below does not hold it back.
    h.submit_full(NOW - 10, "short", "b", 1, 4, 3600 - 30, 7, true);
    h.submit_full(NOW - 10, "u", "a", 1, 4, 0, 0, true);
    let d = h.decide(NOW);
    // n0 only takes work protected until the window closes it, 30 s before it starts at
    // NOW+1h: "short" (exactly until then) and unallocated "u".
    // "big" (2 h) can start on n0 once the window ends at NOW+3h, before n1 frees at NOW+5h.
    assert_eq!(placed(&d), [p("short", &[("n0", 4)]), p("u", &[("n0", 4)])]);
    let r = d.reservation.as_ref().unwrap();
    assert_eq!(
        (r.job_id, r.start_ms, r.nodes[0].node),
        ("big", NOW + 3 * HOUR, "n0")
    );
    assert_eq!(reason(&d, "long"), "maintenance_window");
    // Told that the window sets its start: n0's GPUs are free already, no minimum runtime
    // holds them.
    let big = d.waiting.iter().find(|w| w.job_id == "big").unwrap();
    assert!(
        matches!(
            big.reason,
            WaitReason::ReservationPending {
                after_window: true,
                ..
            }
        ),
        "{:?}",
        big.reason
    );
    assert!(
        big.reason
            .to_string()
            .contains("a maintenance window on the reserved nodes sets that time"),
        "{}",
        big.reason
    );
    // Without the window, n1's work sets it (free at NOW+5h): the usual words.
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    h.running(NOW - HOUR, "r", "a", 6 * 3600, &[("n1", 6)]);
    h.running(NOW - HOUR, "r0", "b", 3 * 3600, &[("n0", 6)]);
    h.submit_full(NOW - 10, "big", "a", 1, 8, 2 * 3600, 9, true);
    let d = h.decide(NOW);
    let big = d.waiting.iter().find(|w| w.job_id == "big").unwrap();
    assert!(
        matches!(
            big.reason,
            WaitReason::ReservationPending {
                after_window: false,
                ..
            }
        ),
        "{:?}",
        big.reason
    );
}

#[test]
fn a_window_closes_its_node_a_grace_period_before_it_starts() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    h.node("n0", 8);
    let t = NOW + HOUR;
    h.maintenance(NOW - HOUR, &["n0"], t, t + HOUR);
    // Protected until exactly T: the preemption service starts clearing the node 30 s before
    // T (its grace), which would be inside this protection.
    h.submit_full(NOW - 10, "until_t", "a", 1, 4, 3600, 9, true);
    h.submit_full(NOW - 10, "until_t_less_30s", "a", 1, 4, 3600 - 30, 8, true);
    let d = h.decide(NOW);
    assert_eq!(placed_ids(&d), ["until_t_less_30s"]);
    // It starts after the window instead.
    let r = d.reservation.as_ref().unwrap();
    assert_eq!((r.job_id, r.start_ms), ("until_t", t + HOUR));
    // From T - 30 s the node is being cleared: even unallocated work, which would be ordered
    // off at once, is not placed there.
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    h.node("n0", 8);
    h.maintenance(NOW - HOUR, &["n0"], t, t + HOUR);
    h.submit(NOW - 10, "u", "a", 1, 0);
    assert_eq!(placed_ids(&h.decide(t - 30_001)), ["u"]);
    let d = h.decide(t - 30_000);
    assert!(d.placements.is_empty());
    assert_eq!(reason(&d, "u"), "maintenance_window");
}

#[test]
fn a_node_in_maintenance_takes_nothing() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    h.node("n0", 8);
    h.maintenance(NOW - HOUR, &["n0"], NOW - 10, NOW + HOUR);
    h.submit(NOW - 10, "u", "a", 1, 0);
    let d = h.decide(NOW);
    assert!(d.placements.is_empty());
    assert_eq!(reason(&d, "u"), "maintenance_window");
    // After the window the node takes work again.
    assert_eq!(placed_ids(&h.decide(NOW + HOUR)), ["u"]);
}

#[test]
fn a_cancelled_window_no_longer_closes_its_node_and_an_unknown_one_changes_nothing() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    let (start, end) = (NOW - 10, NOW + HOUR);
    h.maintenance(NOW - HOUR, &["n0", "n1"], start, end);
    h.submit(NOW - 10, "u", "a", 1, 0);
    assert!(h.decide(NOW).placements.is_empty());
    let cancel = |nodes: &[&str], start_ms, end_ms| {
        Body::MaintenanceCancelled(pb::MaintenanceCancelled {
            cluster: CLUSTER.into(),
            nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
            start_ms,
            end_ms,
            reason: "moved".into(),
        })
    };
    // Another window's times, or nodes without it: refused, both windows stand.
    for (nodes, s, e) in [(&["n0"][..], start, end + 1), (&["n9"][..], start, end)] {
        assert_eq!(
            h.apply(NOW, cancel(nodes, s, e)),
            Err(Ignored::UnknownWindow {
                start_ms: s,
                end_ms: e
            })
        );
    }
    assert_eq!(h.state.maintenance("n0").len(), 1);
    assert!(h.decide(NOW).placements.is_empty());
    // Taken back on n1 only: n1 takes work again, n0 stays closed.
    h.ok(NOW, cancel(&["n1"], start, end));
    assert!(h.state.maintenance("n1").is_empty());
    assert_eq!(h.state.maintenance("n0").len(), 1);
    assert_eq!(placed(&h.decide(NOW)), [p("u", &[("n1", 1)])]);
}

#[test]
fn projected_usage_spreads_gpus_over_equally_behind_allocations() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    h.snapshot(NOW, &[("a", 100, 1000), ("b", 100, 1000)]);
    for i in 1..=8 {
        h.submit(NOW - 100 + i, &format!("a{i}"), "a", 1, 3600);
        h.submit(NOW - 100 + i, &format!("b{i}"), "b", 1, 3600);
    }
    let d = h.decide(NOW);
    // Each placement charges 1 GPU x 1 h to its allocation, so the other one is behind next.
    assert_eq!(
        placed_ids(&d),
        ["a1", "b1", "a2", "b2", "a3", "b3", "a4", "b4"]
    );
    // The next in rank (a5, the tie breaking by name) holds the reservation; the rest had room
    // at the start of the cycle and lost it to higher-ranked work.
    assert_eq!(reason(&d, "a5"), "reservation_pending");
    for id in ["a6", "a7", "a8", "b5", "b6", "b7", "b8"] {
        assert_eq!(reason(&d, id), "below_others_in_rank", "{id}");
    }
    // The teams took turns: four of each were placed ahead of the jobs left.
    let text = reason_text(&d, "b6");
    assert!(
        text.contains("8 jobs placed before it in the cycle had theirs: 4 of its own allocation"),
        "{text}"
    );
}

/// A job whose free GPUs went to its own allocation's earlier jobs is told so, not that
/// higher-ranked allocations took them; with both, each is counted.
#[test]
fn a_job_behind_its_own_allocations_work_is_told_so() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    for i in 1..=10 {
        h.submit(NOW - 100 + i, &format!("a{i}"), "a", 1, 3600);
    }
    // Unallocated work of the same allocation: all allocated work goes before it.
    h.submit(NOW - 100, "u1", "a", 1, 0);
    let d = h.decide(NOW);
    assert_eq!(placed_ids(&d).len(), 8);
    assert_eq!(reason(&d, "a9"), "reservation_pending");
    assert_eq!(reason(&d, "a10"), "below_others_in_rank");
    let text = reason_text(&d, "a10");
    assert!(
        text.contains("not once the 8 jobs of its own allocation placed before it"),
        "{text}"
    );
    assert!(!text.contains("ranked ahead"), "{text}");
    let text = reason_text(&d, "u1");
    assert!(
        text.contains("8 jobs placed before it in the cycle had theirs (allocated work goes first"),
        "{text}"
    );
}

/// Two equal teams on one 8-GPU node, `b` 3 GPU-h ahead in the window, eight 1-GPU jobs each.
fn a_far_behind(share_floor: bool) -> H {
    let mut h = H::new();
    h.state.set_share_floor(share_floor);
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    let allocated = 100 * HOUR as u64;
    h.snapshot(
        NOW,
        &[("a", 0, allocated), ("b", 3 * HOUR as u64, allocated)],
    );
    for i in 1..=8 {
        h.submit(NOW - 100 + i, &format!("a{i}"), "a", 1, 3600);
        h.submit(NOW - 100 + i, &format!("b{i}"), "b", 1, 3600);
    }
    h
}

#[test]
fn an_allocation_far_behind_gets_more_until_it_catches_up() {
    // The window alone (the share floor would split the node 4 / 4: see the next test).
    let h = a_far_behind(false);
    let d = h.decide(NOW);
    // a: 0, 1, 2 GPU-h are below b's 3; at 3-3 the name decides (a); then they alternate:
    // a a a a b a b a.
    assert_eq!(
        placed_ids(&d),
        ["a1", "a2", "a3", "a4", "b1", "a5", "b2", "a6"]
    );
}

#[test]
fn below_their_share_floor_allocations_go_first_until_they_reach_it() {
    // The same as above with the share floor: each floor is 4 of the 8 GPUs.
    let h = a_far_behind(true);
    let d = h.decide(NOW);
    // Both below their floor: window order (a) until a holds 4; then b, below its floor
    // still, though the window ranks it last.
    assert_eq!(
        placed_ids(&d),
        ["a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4"]
    );
    // Both at their floor: the window's order again, a (4 GPU-h charged) before b (7).
    assert_eq!(reason(&d, "a5"), "reservation_pending");
    assert_eq!(reason(&d, "b5"), "below_others_in_rank");
}

#[test]
fn an_allocation_below_its_floor_goes_before_better_window_ranks() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    // a holds its floor (4 GPUs) and has used nothing; b holds nothing and used a lot.
    h.running(NOW - HOUR, "a-run", "a", 3600, &[("n0", 4)]);
    let allocated = 100 * HOUR as u64;
    h.snapshot(
        NOW,
        &[("a", 0, allocated), ("b", 50 * HOUR as u64, allocated)],
    );
    h.submit(NOW - 10, "a1", "a", 2, 3600);
    h.submit(NOW - 5, "b1", "b", 2, 3600);
    h.submit(NOW - 5, "b2", "b", 2, 3600);
    let d = h.decide(NOW);
    assert_eq!(placed_ids(&d), ["b1", "b2"]);
    // Then b holds its floor too, and a's job is first by the window: it waits for the node.
    assert_eq!(reason(&d, "a1"), "reservation_pending");
    // Without the floor the window goes first.
    h.state.set_share_floor(false);
    assert_eq!(placed_ids(&h.decide(NOW)), ["a1", "b1"]);
}

#[test]
fn unallocated_work_fills_what_allocated_work_leaves() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    h.snapshot(NOW, &[("a", 0, 1000), ("b", 0, 1000)]);
    // Unallocated work submitted first does not go first.
    h.submit(NOW - 500, "u1", "a", 4, 0);
    h.submit(NOW - 500, "u2", "b", 8, 0);
    h.submit(NOW - 400, "x", "b", 8, 3600);
    h.submit(NOW - 300, "y", "a", 4, 3600);
    let d = h.decide(NOW);
    // a ranks first (tie by name): y opens n0; then b's x takes n1; u1 fills n0's other half;
    // u2 finds nothing left.
    assert_eq!(
        placed(&d),
        [
            p("y", &[("n0", 4)]),
            p("x", &[("n1", 8)]),
            p("u1", &[("n0", 4)])
        ]
    );
    assert!(d.placements[2].unallocated && !d.placements[0].unallocated);
    assert_eq!(reason(&d, "u2"), "below_others_in_rank");
    // Unallocated work never holds a reservation.
    assert!(d.reservation.is_none());
}

#[test]
fn rank_order_decides_who_gets_scarce_gpus() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 3)]);
    h.node("n0", 8);
    // a: 30/100 = 0.3; b: 60/300 = 0.2 -> b first although it used more.
    h.snapshot(NOW, &[("a", 30, 100), ("b", 60, 300)]);
    h.submit(NOW - 900, "a-old", "a", 8, 3600);
    h.submit(NOW - 100, "b-new", "b", 8, 3600);
    let d = h.decide(NOW);
    assert_eq!(d.ranking, ["b", "a"]);
    assert_eq!(placed_ids(&d), ["b-new"]);
}

#[test]
fn within_an_allocation_priority_then_submit_time_then_id() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    h.node("n0", 3);
    h.submit_full(NOW - 10, "late-high", "a", 1, 1, 60, 5, true);
    h.submit_full(NOW - 50, "early-low", "a", 1, 1, 60, 1, true);
    h.submit_full(NOW - 20, "z-mid", "a", 1, 1, 60, 3, true);
    h.submit_full(NOW - 20, "y-mid", "a", 1, 1, 60, 3, true);
    let d = h.decide(NOW);
    assert_eq!(placed_ids(&d), ["late-high", "y-mid", "z-mid"]);
    assert_eq!(reason(&d, "early-low"), "reservation_pending");
}

#[test]
fn work_placed_since_the_snapshot_counts_against_its_allocation() {
    let build = |with_running: bool| {
        let mut h = H::new();
        h.tree(vec![leaf("a", 1), leaf("b", 1)]);
        h.node("n0", 8);
        h.snapshot(
            NOW - HOUR,
            &[("a", 0, 1000 * HOUR as u64), ("b", 0, 1000 * HOUR as u64)],
        );
        if with_running {
            // 2 GPUs from NOW-50m, protected 2 h: 2 x 2 h projected since the snapshot.
            h.running(NOW - 50 * MIN, "r", "a", 2 * 3600, &[("n0", 2)]);
        }
        h.submit(NOW - 10, "ja", "a", 1, 3600);
        h.submit(NOW - 10, "jb", "b", 1, 3600);
        let d = h.decide(NOW);
        let ranking: Vec<String> = d.ranking.iter().map(|r| r.to_string()).collect();
        (ranking, placed_ids(&d))
    };
    let (ranking, placed) = build(false);
    assert_eq!(ranking, ["a", "b"]);
    assert_eq!(placed, ["ja", "jb"]);
    let (ranking, placed) = build(true);
    assert_eq!(ranking, ["b", "a"]);
    assert_eq!(placed, ["jb", "ja"]);
}

#[test]
fn slurm_example_ranks_through_decide() {
    use super::support::acc;
    let mut h = H::new();
    h.tree(vec![
        acc("A", 40, vec![leaf("a1", 1), leaf("a2", 3)]),
        acc("B", 60, vec![leaf("b1", 1), leaf("b2", 1), leaf("b3", 2)]),
    ]);
    h.snapshot(
        NOW,
        &[
            ("A/a1", 100, 100),
            ("A/a2", 100, 300),
            ("B/b1", 300, 150),
            ("B/b2", 0, 150),
            ("B/b3", 200, 300),
        ],
    );
    let d = h.decide(NOW);
    assert_eq!(d.ranking, ["A/a2", "A/a1", "B/b2", "B/b3", "B/b1"]);
}

#[test]
fn too_large_and_unknown_allocation_reasons() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("gone", 1)]);
    h.node("n0", 8);
    h.running(NOW - HOUR, "r", "a", 4 * 3600, &[("n0", 7)]);
    h.submit(NOW - 10, "four", "a", 4, 3600);
    h.submit(NOW - 5, "two", "a", 2, 3600);
    h.submit(NOW - 5, "orphan", "gone", 1, 3600);
    h.tree(vec![leaf("a", 1)]);
    let d = h.decide(NOW);
    assert_eq!(reason(&d, "four"), "reservation_pending");
    let two = d.waiting.iter().find(|w| w.job_id == "two").unwrap();
    assert_eq!(
        two.reason,
        WaitReason::TooLargeForFreeNodes {
            nodes: 1,
            gpus_per_node: 2,
            largest_free: 1
        }
    );
    assert_eq!(
        two.reason.to_string(),
        "needs 2 GPUs on one node; the most free on any node is 1"
    );
    assert_eq!(reason(&d, "orphan"), "unknown_allocation");
    assert_eq!(d.waiting.last().map(|w| w.job_id), Some("orphan"));
}

/// A job of an allocation the tree no longer has starts nowhere, unallocated or not: explain
/// says so and what to do, without the unallocated rule that does not apply to it.
#[test]
fn a_removed_allocations_unallocated_job_is_told_it_starts_nowhere() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("gone", 1)]);
    h.node("n0", 8);
    h.submit(NOW - 5, "free", "gone", 1, 0);
    h.tree(vec![leaf("a", 1)]);
    let e = crate::domain::explain(&h.state, "free", NOW).unwrap();
    assert_eq!(e.reason_code, "unknown_allocation");
    assert!(
        e.reason.contains("it starts nowhere, unallocated or not"),
        "{}",
        e.reason
    );
    assert!(
        e.reason.contains("submit it again under an allocation"),
        "{}",
        e.reason
    );
    assert!(!e.reason.contains("it is unallocated work"), "{}", e.reason);
}

#[test]
fn without_a_budget_tree_everything_waits() {
    let mut h = H::new();
    h.node("n0", 8);
    h.submit(NOW - 10, "j", "a", 1, 3600);
    let d = h.decide(NOW);
    assert!(d.placements.is_empty() && d.ranking.is_empty());
    assert_eq!(reason(&d, "j"), "no_budget_tree");
}

#[test]
fn decisions_become_job_placed_events_that_the_fold_accepts() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    for i in 0..6 {
        h.submit(NOW - 100 + i, &format!("a{i}"), "a", 4, 3600);
        h.submit(NOW - 100 + i, &format!("b{i}"), "b", 2, 1800);
    }
    let through = h.state.last_applied();
    let d = h.decide(NOW);
    assert_eq!(d, h.decide(NOW), "same inputs, same decision");
    let events = d.events(42);
    assert_eq!(events.len(), d.placements.len());
    for (e, p) in events.iter().zip(&d.placements) {
        assert_eq!(e.at_ms, NOW);
        let Some(fairshare_events::pb::event::Body::JobPlaced(jp)) = &e.body else {
            panic!("not a placement");
        };
        assert_eq!(jp.job_id, p.job_id);
        let basis = jp.basis.as_ref().unwrap();
        assert_eq!(
            (basis.through_sequence, basis.computed_at_ms, basis.cycle),
            (through, NOW, 42)
        );
    }
    let total: u32 = d
        .placements
        .iter()
        .flat_map(|p| p.nodes.iter().map(|n| n.gpus))
        .sum();
    assert_eq!(total, 16, "both nodes filled");
    let (placed, waiting) = (d.placements.len(), d.waiting.len());
    // Fold the decision back: nothing is placed twice, the waiting jobs are still waiting.
    for e in &events {
        let body = e.body.clone().unwrap();
        h.ok(NOW, body);
    }
    let again = h.decide(NOW + 1);
    assert!(again.placements.is_empty());
    assert_eq!(again.waiting.len(), waiting);
    assert_eq!(h.state.queued_len(), 12 - placed);
}

#[test]
fn a_floor_just_above_what_is_held_does_not_read_as_equal_to_it() {
    let mut h = H::new();
    // 201 GPUs, a's fraction 1/25: its floor is 8.04, and it holds 8.
    h.tree(vec![leaf("a", 1), leaf("b", 24)]);
    h.node("n0", 201);
    h.running(NOW - HOUR, "a-run", "a", 3600, &[("n0", 8)]);
    h.running(NOW - HOUR, "b-run", "b", 3600, &[("n0", 193)]);
    h.submit(NOW - 10, "a1", "a", 1, 3600);
    let said = crate::domain::explain(&h.state, "a1", NOW)
        .map(|e| e.reason)
        .unwrap_or_default();
    assert!(
        said.contains("; a holds 8 GPUs against a share floor of 8.04: it goes before every"),
        "{said}"
    );
}

/// A debug job of an allocation with no share (share 0) gets no allowance: it ranks after every
/// allocation with a share, so the free GPUs go to their waiting work first.
#[test]
fn a_debug_job_of_an_allocation_with_no_share_does_not_go_first() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("scavenger", 0)]);
    h.node("n0", 2);
    h.state.set_debug_allowance_gpus(4);
    h.submit(NOW - 20, "scav-dbg", "scavenger", 2, 600);
    h.submit(NOW - 10, "a-job", "a", 2, 3600);
    assert_eq!(placed_ids(&h.decide(NOW)), vec!["a-job".to_owned()]);
}

#[test]
fn a_waiting_debug_job_within_its_allowance_is_told_it_goes_before_the_rank_order() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    h.state.set_debug_allowance_gpus(4);
    h.running(NOW - 5 * MIN, "b-run", "b", 3600, &[("n0", 8)]);
    h.submit(NOW - 10, "dbg", "a", 2, 600);
    h.submit(NOW - 10, "big", "a", 4, 3600);
    let said = |id: &str| {
        crate::domain::explain(&h.state, id, NOW)
            .map(|e| e.reason)
            .unwrap_or_default()
    };
    let dbg = said("dbg");
    assert!(
        dbg.contains("as a debug job within its allocation's debug allowance (4 GPUs), it is met before all work in rank order")
            && !dbg.contains("share floor"),
        "{dbg}"
    );
    // Work of the same allocation in rank order is told of its floor as before.
    assert!(
        said("big").contains("against a share floor of"),
        "{}",
        said("big")
    );
}

#[test]
fn explain_says_where_the_allocation_stands_against_its_floor() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 2)]);
    h.node("n0", 8);
    // 8 GPUs: floors 2.7 (a) and 5.3 (b). a holds all 8; both wait for more.
    h.running(NOW - HOUR, "a-run", "a", 3600, &[("n0", 8)]);
    h.submit(NOW - 10, "a1", "a", 1, 3600);
    h.submit(NOW - 5, "b1", "b", 1, 3600);
    let reason_in = |h: &H, id: &str| {
        crate::domain::explain(&h.state, id, NOW)
            .map(|e| e.reason)
            .unwrap_or_default()
    };
    let reason = |id: &str| reason_in(&h, id);
    assert!(
        reason("b1").ends_with(
            "; b holds 0 GPUs against a share floor of 5.3: it goes before every allocation at \
             or above its own"
        ),
        "{}",
        reason("b1")
    );
    // (Then that b1, which holds the reservation, goes first.)
    assert!(
        reason("a1").contains(
            "; a holds 8 GPUs against a share floor of 2.7: allocations below theirs go first, \
             then the window decides; job b1 of b ranks ahead of it"
        ),
        "{}",
        reason("a1")
    );
    // Unallocated work is not moved by its allocation's floor: it is told so, not promised
    // to go first, and given no rank.
    h.submit(NOW - 4, "b-free", "b", 1, 0);
    let free = reason_in(&h, "b-free");
    assert!(free.starts_with("needs 1 GPU on one node;"), "{free}");
    let ranked = crate::domain::explain(&h.state, "b-free", NOW).unwrap();
    assert_eq!(ranked.allocation_rank, 0);
    assert_eq!(
        crate::domain::explain(&h.state, "b1", NOW)
            .unwrap()
            .allocation_rank,
        1
    );
    assert!(
        free.contains("it is unallocated work") && !free.contains("share floor"),
        "{free}"
    );
    // Without the floor there is nothing to say about it.
    h.state.set_share_floor(false);
    let plain = reason_in(&h, "b1");
    assert!(
        !plain.is_empty() && !plain.contains("share floor"),
        "{plain}"
    );
}

/// The floor note counts what an allocation holds as ranking does (work ordered off does not
/// count) and says so, and says that an allocation of share 0 ranks after every one with a
/// share rather than by the window.
#[test]
fn the_floor_note_names_work_ordered_off_and_shares_of_zero() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1), leaf("c", 0)]);
    h.node("n0", 8);
    h.running(NOW - HOUR, "a-run", "a", 60, &[("n0", 8)]);
    h.ok(
        NOW - 10,
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "a-run".into(),
            grace_deadline_ms: NOW + MIN,
            for_job_id: "b1".into(),
            ..Default::default()
        }),
    );
    h.submit(NOW - 8, "a1", "a", 1, 3600);
    h.submit(NOW - 5, "b1", "b", 8, 3600);
    h.submit(NOW - 4, "c1", "c", 1, 3600);
    let reason = |id: &str| {
        crate::domain::explain(&h.state, id, NOW)
            .map(|e| e.reason)
            .unwrap_or_default()
    };
    assert!(
        reason("a1").contains(
            "; a holds 0 GPUs (not counting 8 GPUs of its work ordered off and stopping) against \
             a share floor of 4.0"
        ),
        "{}",
        reason("a1")
    );
    assert!(
        reason("c1").contains(
            "; c has no share of the cluster (share 0): it ranks after every allocation with \
             one, and gets only GPUs they leave"
        ),
        "{}",
        reason("c1")
    );
}

#[test]
fn explain_names_the_reserved_job_a_waiting_job_is_behind() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    // Both nodes are partly held by protected work; neither 8-GPU job fits.
    h.running(NOW - 30 * MIN, "r0", "b", 3600, &[("n0", 4)]);
    h.running(NOW - 30 * MIN, "r1", "b", 2 * 3600, &[("n1", 4)]);
    h.submit_full(NOW - 50, "first", "a", 1, 8, 3600, 10, true);
    h.submit_full(NOW - 50, "second", "a", 1, 8, 3600, 5, true);
    let d = h.decide(NOW);
    assert_eq!(d.reservation.as_ref().map(|r| r.job_id), Some("first"));
    let explain = |job: &str| crate::domain::explain(&h.state, job, NOW).unwrap();
    let second = explain("second");
    assert_eq!(second.reason_code, "too_large_for_free_nodes");
    assert!(
        second
            .reason
            .contains("job first of a ranks ahead of it and holds the cycle's reservation"),
        "{}",
        second.reason
    );
    // What may still be ordered off for it meanwhile: work off the reserved nodes
    // (unallocated that checkpointed lately, or by the rules while below its floor), and
    // packing moves; it is no debug job, so nothing is said of the allowance.
    assert!(
        second.reason.contains(
            "unallocated work (for a job that fits one node, only work that checkpointed lately)"
        ),
        "{}",
        second.reason
    );
    assert!(
        second
            .reason
            .contains("or work moved into free GPUs on other nodes to make room on one)"),
        "{}",
        second.reason
    );
    assert!(!second.reason.contains("debug"), "{}", second.reason);
    // The reserved job itself is told of its reservation, not of itself.
    let first = explain("first");
    assert_eq!(first.reason_code, "reservation_pending");
    assert!(
        !first.reason.contains("ranks ahead of it"),
        "{}",
        first.reason
    );
}

#[test]
fn explain_places_an_allocation_below_its_floor_first_whatever_the_window_says() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    // b has used far more over the window, so the window ranks a first; but a holds all 8
    // GPUs (floor 4) and b none: b is below its floor, and the cycle serves it first.
    h.running(NOW - HOUR, "a-run", "a", 8 * 3600, &[("n0", 8)]);
    let hour = 3_600_000u64;
    h.snapshot(
        NOW,
        &[("a", hour, 100 * hour), ("b", 90 * hour, 100 * hour)],
    );
    h.submit(NOW - 10, "a1", "a", 1, 3600);
    h.submit(NOW - 5, "b1", "b", 1, 3600);
    let rank = |h: &H, id: &str| {
        crate::domain::explain(&h.state, id, NOW)
            .unwrap()
            .allocation_rank
    };
    assert_eq!(h.decide(NOW).ranking, ["a", "b"], "the window's order");
    assert_eq!((rank(&h, "b1"), rank(&h, "a1")), (1, 2));
    // Without the floor, the window's order is the serving order.
    h.state.set_share_floor(false);
    assert_eq!((rank(&h, "b1"), rank(&h, "a1")), (2, 1));
}

#[test]
fn explain_names_no_reservation_held_by_a_job_behind() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    h.cordon("n1");
    h.running(NOW - 30 * MIN, "r0", "a", 3600, &[("n0", 4)]);
    // "big" ranks first but no uncordoned capacity holds it: no reservation for it; "next"
    // behind it gets the cycle's reservation.
    h.submit_full(NOW - 50, "big", "a", 2, 8, 3600, 10, true);
    h.submit_full(NOW - 50, "next", "a", 1, 8, 3600, 5, true);
    let d = h.decide(NOW);
    assert_eq!(d.reservation.as_ref().map(|r| r.job_id), Some("next"));
    let big = crate::domain::explain(&h.state, "big", NOW).unwrap();
    assert!(
        !big.reason.contains("holds the cycle's reservation"),
        "{}",
        big.reason
    );
}

#[test]
fn explain_says_why_a_job_is_being_stopped_and_was_stopped() {
    use fairshare_events::pb::{self, event::Body};
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    h.node("n0", 8);
    h.running(NOW - 2 * HOUR, "v", "a", 3600, &[("n0", 8)]);
    h.submit(NOW - 10, "w", "b", 8, 3600);
    let explain = |h: &H, now: i64| crate::domain::explain(&h.state, "v", now).unwrap();
    // Running, never ordered off: nothing to say.
    let e = explain(&h, NOW);
    assert_eq!((e.status.as_str(), e.reason.as_str()), ("running", ""));
    assert!(e.last_preemption.is_none());

    let order = |reason: &str, deadline: i64, cause: pb::PreemptionCause| {
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "v".into(),
            grace_deadline_ms: deadline,
            reason: reason.into(),
            for_job_id: "w".into(),
            basis: None,
            cause: cause.into(),
        })
    };
    h.ok(
        NOW,
        order(
            "fair share: makes room for job w",
            NOW + 30_000,
            pb::PreemptionCause::Window,
        ),
    );
    // A second order in the same run (another pass) may only bring the deadline forward: the
    // first one's reason and cause are what stop the job, by the earlier deadline.
    h.ok(
        NOW + 1,
        order(
            "a later reason",
            NOW + 20_000,
            pb::PreemptionCause::ShareFloor,
        ),
    );
    let e = explain(&h, NOW + 2);
    assert_eq!(e.status, "running");
    assert_eq!(e.reason_code, "ordered_off");
    assert_eq!(e.reason, "ordered off: fair share: makes room for job w");
    assert_eq!(
        e.last_preemption,
        Some(pb::PreemptionNote {
            ordered_at_ms: NOW,
            for_job_id: "w".into(),
            reason: "fair share: makes room for job w".into(),
            grace_deadline_ms: NOW + 20_000,
            cause: pb::PreemptionCause::Window.into(),
        })
    );

    h.ok(
        NOW + 10_000,
        Body::JobPreempted(pb::JobPreempted {
            job_id: "v".into(),
            killed: false,
        }),
    );
    let e = explain(&h, NOW + 10_000);
    assert_eq!(e.status, "preempted");
    assert_eq!(e.reason_code, "awaiting_requeue");
    assert_eq!(
        e.reason,
        "preempted (fair share: makes room for job w); waiting for its requeue"
    );

    // Requeued, it waits like any job, and the note says why it ran before and waits again.
    h.ok(
        NOW + 10_000,
        Body::JobRequeued(pb::JobRequeued { job_id: "v".into() }),
    );
    let e = explain(&h, NOW + 10_000);
    assert_eq!(e.status, "queued");
    assert_ne!(e.reason_code, "ordered_off");
    assert_eq!(e.last_preemption.map(|n| n.ordered_at_ms), Some(NOW));
}

#[test]
fn queued_single_node_jobs_fill_a_node_largest_first() {
    use fairshare_model::shape::Shape;
    let one = |gpus| Shape {
        nodes: 1,
        gpus_per_node: gpus,
    };
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    assert_eq!(
        h.state.queued_single_node_fill(7, one(1)),
        0,
        "nothing queued"
    );
    h.submit(0, "four-1", "a", 4, 3600);
    h.submit(0, "four-2", "a", 4, 0);
    // 8 GPUs of work, but only one 4-GPU job fits in 7.
    assert_eq!(h.state.queued_single_node_fill(7, one(1)), 4);
    h.submit(0, "two", "a", 2, 3600);
    h.submit(0, "one", "a", 1, 600);
    h.submit_full(0, "wide", "a", 2, 1, 3600, 0, true);
    assert_eq!(h.state.queued_single_node_fill(7, one(3)), 7, "4 + 2 + 1");
    // The asking job's own shape counts one job less: without "one", 4 + 2; without "two",
    // 4 + 1.
    assert_eq!(h.state.queued_single_node_fill(7, one(1)), 6);
    assert_eq!(h.state.queued_single_node_fill(7, one(2)), 5);
    // A job larger than the room is passed over, never counted in part.
    assert_eq!(h.state.queued_single_node_fill(3, one(4)), 3, "2 + 1");
    assert_eq!(
        h.state.queued_single_node_fill(0, one(1)),
        0,
        "nothing to fill"
    );
}

#[test]
fn a_cycle_can_place_only_queued_shapes_that_fit_the_free_gpus() {
    use fairshare_events::pb::{self, event::Body};
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    nodes(&mut h, &["n1", "n2"], 8);
    // Wholly free, but cordoned: it takes nothing.
    h.node("big", 16);
    h.cordon("big");
    assert!(!h.state.any_queued_shape_fits(), "nothing queued");
    h.running(0, "r1", "a", 3600, &[("n1", 5)]);
    h.running(0, "r2", "a", 3600, &[("n2", 5)]);
    // 3 GPUs free on each 8-GPU node.
    h.submit(0, "four", "a", 4, 3600);
    h.submit_full(0, "two-nodes", "a", 2, 8, 3600, 0, true);
    assert!(!h.state.any_queued_shape_fits());
    assert!(h.decide(NOW).placements.is_empty());
    h.submit(0, "three", "a", 3, 3600);
    assert!(h.state.any_queued_shape_fits());
    assert_eq!(placed_ids(&h.decide(NOW)), vec!["three"]);
    // Placed, it leaves the queue and its shape's count.
    h.place(NOW, "three", &[("n1", 3)]);
    assert!(!h.state.any_queued_shape_fits());
    let finish = |h: &mut H, id: &str| {
        h.ok(
            NOW,
            Body::JobFinished(pb::JobFinished {
                job_id: id.into(),
                exit_code: 0,
            }),
        )
    };
    finish(&mut h, "r2");
    // n2 is wholly free: the 4-GPU job fits, the two-node job (two whole 8-GPU nodes) not.
    assert!(h.state.any_queued_shape_fits());
    assert_eq!(placed_ids(&h.decide(NOW)), vec!["four"]);
    h.place(NOW, "four", &[("n2", 4)]);
    assert!(!h.state.any_queued_shape_fits());
    finish(&mut h, "four");
    finish(&mut h, "r1");
    finish(&mut h, "three");
    assert!(h.state.any_queued_shape_fits());
    assert_eq!(placed_ids(&h.decide(NOW)), vec!["two-nodes"]);
}

#[test]
fn waiting_reasons_give_instants_as_utc_dates() {
    let r = WaitReason::ReservationPending {
        start_ms: 1_796_026_868_873,
        reclaimable_now: false,
        after_window: false,
        own_allocation_work: false,
    };
    assert_eq!(
        r.to_string(),
        "holds a reservation; the work on its GPUs can be reclaimed from 2026-11-30T08:21:08.873Z at \
         the earliest (once its minimum runtimes end), if the preemption rules let it go for this \
         job, and otherwise as it ends"
    );
    // Reclaimable at the cycle's own time: no date that reads like "about to start".
    let now = WaitReason::ReservationPending {
        start_ms: 1_796_026_868_873,
        reclaimable_now: true,
        after_window: false,
        own_allocation_work: false,
    };
    assert!(!now.to_string().contains("2026"), "{now}");
    assert!(
        now.to_string()
            .contains("past its minimum runtimes already"),
        "{now}"
    );
}

/// A debug job behind the reservation holder is told that, as a debug job, it may still have
/// work past its minimum runtime ordered off for it while its allocation's allowance has room:
/// the preemption service meets debug jobs under their allowance before the rank walk.
#[test]
fn a_debug_job_behind_the_reservation_is_told_of_the_allowance() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    // a's debug allowance (2 GPUs) is in use, so its next debug job waits in rank order.
    h.state.set_debug_allowance_gpus(2);
    h.running(NOW - 5 * MIN, "adbg", "a", 600, &[("n0", 2)]);
    h.running(NOW - 30 * MIN, "r0", "b", 3600, &[("n0", 6)]);
    h.running(NOW - 30 * MIN, "r1", "b", 2 * 3600, &[("n1", 8)]);
    h.submit_full(NOW - 50, "first", "a", 1, 8, 3600, 10, true);
    h.submit_full(NOW - 40, "dbg", "a", 1, 1, 600, 0, true);
    let dbg = reason_behind_first(&h, "dbg");
    assert!(
        dbg.ends_with(
            "; as a debug job it may still have work past its minimum runtime ordered off for \
             it before that, while its allocation's debug allowance has room, and the \
             unallocated work off the reserved nodes may be ordered off for it however long ago \
             that work last checkpointed"
        ),
        "{dbg}"
    );
}

/// `job`'s explain text, checked to say that job "first" holds the reservation ahead of it.
fn reason_behind_first(h: &H, job: &str) -> String {
    let d = h.decide(NOW);
    assert_eq!(d.reservation.as_ref().map(|r| r.job_id), Some("first"));
    let reason = crate::domain::explain(&h.state, job, NOW).unwrap().reason;
    assert!(
        reason.contains("job first of a ranks ahead of it and holds the cycle's reservation"),
        "{reason}"
    );
    reason
}

/// With no debug allowance, a debug-sized job behind the reservation holder is still told that
/// the unallocated work off the reserved nodes may go for it however long ago it last
/// checkpointed (the preemption walk exempts it by its size and minimum runtime), and not that
/// an allowance may order work off for it.
#[test]
fn a_debug_sized_job_behind_the_reservation_without_an_allowance_is_told_its_exemption() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1"], 8);
    h.state.set_debug_allowance_gpus(0);
    h.running(NOW - 30 * MIN, "r0", "b", 3600, &[("n0", 8)]);
    h.running(NOW - 30 * MIN, "r1", "b", 2 * 3600, &[("n1", 8)]);
    h.submit_full(NOW - 50, "first", "a", 1, 8, 3600, 10, true);
    h.submit_full(NOW - 40, "dbg", "a", 1, 1, 600, 0, true);
    h.submit_full(NOW - 30, "small", "a", 1, 1, 3600, 0, true);
    let dbg = reason_behind_first(&h, "dbg");
    assert!(
        dbg.ends_with(
            "; as a debug job (no debug allowance covers it), the unallocated work off the \
             reserved nodes may be ordered off for it however long ago that work last \
             checkpointed"
        ),
        "{dbg}"
    );
    // A job of the same size with a longer minimum runtime is no debug job: no exception.
    let small = reason_behind_first(&h, "small");
    assert!(!small.contains("as a debug job"), "{small}");
}

/// Jobs submitted against nodes that are gone since (removed, or registered again with fewer
/// GPUs) are told they can never start, not that they wait for room, and hold up nobody.
#[test]
fn a_job_no_registered_node_could_hold_is_told_so_and_holds_up_nobody() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 2), leaf("b", 1)]);
    nodes(&mut h, &["n0", "n1", "n2"], 8);
    h.submit_full(NOW - 50, "wide", "a", 3, 8, 3600, 10, true);
    h.submit_full(NOW - 50, "big", "a", 1, 8, 3600, 9, true);
    h.submit_full(NOW - 50, "small", "b", 1, 2, 3600, 0, true);
    // Busy work keeps "big" from fitting now, though a node could hold it.
    h.running(NOW - 10 * MIN, "r0", "b", 3600, &[("n0", 1)]);
    h.running(NOW - 10 * MIN, "r1", "b", 3600, &[("n1", 1)]);
    h.ok(
        NOW - 40,
        Body::NodeRemoved(pb::NodeRemoved {
            cluster: CLUSTER.into(),
            node: "n2".into(),
        }),
    );
    let d = h.decide(NOW);
    assert_eq!(reason(&d, "wide"), "never_fits_cluster");
    let why = reason_text;
    assert!(
        why(&d, "wide").contains("needs 3 whole nodes of 8 GPUs, and the cluster has 2"),
        "{}",
        why(&d, "wide")
    );
    // "big" could fit once a node empties: it waits (and takes the reservation), not "never".
    assert_ne!(reason(&d, "big"), "never_fits_cluster");
    assert_eq!(placed_ids(&d), ["small"]);
    // Work ordered off for "big" makes room for it...
    h.ok(
        NOW - 30,
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "r0".into(),
            grace_deadline_ms: NOW + MIN,
            for_job_id: "big".into(),
            ..Default::default()
        }),
    );
    assert_eq!(reason(&h.decide(NOW), "big"), "room_being_made");
    // ...but registered again with 4 GPUs each, no node holds "big" any more, and that is
    // what it is told.
    for n in ["n0", "n1"] {
        h.node(n, 4);
    }
    let d = h.decide(NOW);
    assert_eq!(reason(&d, "big"), "never_fits_cluster");
    assert!(
        why(&d, "big").contains("needs 8 GPUs on one node, and the largest node has 4"),
        "{}",
        why(&d, "big")
    );
}

#[test]
fn a_reservation_on_its_own_allocations_work_says_it_waits_for_that_work_to_end() {
    // n0 and n1 are each held by 6 GPUs of one running job; "big" (8 GPUs, of a) waits for a
    // node. `holder_of_n0`'s minimum runtime has ended, `holder_of_n1`'s runs for hours.
    let reserved_reason = |holder_of_n0: &str| {
        let mut h = H::new();
        h.tree(vec![leaf("a", 1), leaf("b", 1)]);
        nodes(&mut h, &["n0", "n1"], 8);
        h.running(NOW - 2 * HOUR, "r0", holder_of_n0, 3600, &[("n0", 6)]);
        h.running(NOW - HOUR, "r1", "a", 6 * 3600, &[("n1", 6)]);
        h.submit(NOW - 10, "big", "a", 8, 3600);
        let d = h.decide(NOW);
        let r = d.reservation.as_ref().expect("a reservation");
        assert_eq!((r.job_id, r.start_ms, r.nodes[0].node), ("big", NOW, "n0"));
        let big = d.waiting.iter().find(|w| w.job_id == "big").unwrap();
        let WaitReason::ReservationPending {
            reclaimable_now,
            own_allocation_work,
            ..
        } = big.reason
        else {
            panic!("{:?}", big.reason);
        };
        (reclaimable_now, own_allocation_work, big.reason.to_string())
    };
    // Of another allocation, past its minimum runtime: the preemption rules may let it go.
    let (reclaimable_now, own_work, text) = reserved_reason("b");
    assert!(reclaimable_now && !own_work, "{text}");
    assert!(text.contains("when the preemption rules let it"), "{text}");
    // Of its own allocation: nothing is ordered off for it, whatever the minimum runtime.
    let (_, own_work, text) = reserved_reason("a");
    assert!(own_work, "{text}");
    assert!(
        text.contains("its own allocation's") && text.contains("it starts as that work ends"),
        "{text}"
    );
    assert!(!text.contains("preemption rules let it"), "{text}");
}
