//! The fold: idempotence, cluster routing, job lifecycle and what it holds.

use fairshare_events::pb::{self, event::Body};

use super::support::{CLUSTER, H, HOUR, leaf};
use crate::domain::state::{Holder, JobStatus, RECLAIMABLE_AT_ONCE};
use crate::domain::{DecisionState, Ignored};

fn ev(at_ms: i64, body: Body) -> pb::Event {
    pb::Event {
        at_ms,
        body: Some(body),
    }
}

fn started(id: &str) -> Body {
    Body::JobStarted(pb::JobStarted { job_id: id.into() })
}

fn preempted(id: &str) -> Body {
    Body::JobPreempted(pb::JobPreempted {
        job_id: id.into(),
        killed: false,
    })
}

fn requeued(id: &str) -> Body {
    Body::JobRequeued(pb::JobRequeued { job_id: id.into() })
}

fn finished(id: &str) -> Body {
    Body::JobFinished(pb::JobFinished {
        job_id: id.into(),
        exit_code: 0,
    })
}

#[test]
fn redeliveries_change_nothing_and_ignored_events_still_advance_the_sequence() {
    let mut s = DecisionState::new(CLUSTER);
    let reg = ev(
        0,
        Body::NodeRegistered(pb::NodeRegistered {
            cluster: CLUSTER.into(),
            node: "n0".into(),
            gpus: 8,
        }),
    );
    s.apply(5, &reg).unwrap();
    let before = s.clone();
    assert_eq!(
        s.apply(5, &reg),
        Err(Ignored::Duplicate {
            sequence: 5,
            last_applied: 5
        })
    );
    assert!(matches!(s.apply(3, &reg), Err(Ignored::Duplicate { .. })));
    assert_eq!(s, before);
    // Another cluster's event is ignored but its sequence is folded.
    let other = ev(
        0,
        Body::NodeRegistered(pb::NodeRegistered {
            cluster: "other".into(),
            node: "x".into(),
            gpus: 8,
        }),
    );
    assert_eq!(
        s.apply(6, &other),
        Err(Ignored::OtherCluster {
            cluster: "other".into()
        })
    );
    assert_eq!(s.last_applied(), 6);
    assert_eq!(s.inventory().nodes().len(), 1);
}

#[test]
fn other_clusters_jobs_are_unknown_here() {
    let mut h = H::new();
    let body = Body::JobSubmitted(pb::JobSubmitted {
        job_id: "j".into(),
        spec: Some(pb::JobSpec {
            cluster: "other".into(),
            allocation: "a".into(),
            gpus: 1,
            min_runtime_s: 60,
            ..Default::default()
        }),
        shape: Some(pb::Shape {
            nodes: 1,
            gpus_per_node: 1,
        }),
        ..Default::default()
    });
    assert!(matches!(
        h.apply(0, body),
        Err(Ignored::OtherCluster { .. })
    ));
    assert_eq!(
        h.apply(1, started("j")),
        Err(Ignored::UnknownJob { job_id: "j".into() })
    );
    assert_eq!(h.state.queued_len(), 0);
}

#[test]
fn a_start_stamped_before_its_placement_counts_from_the_placement() {
    let mut h = H::new();
    h.node("n0", 8);
    h.submit(100, "j", "a", 1, 3600);
    h.place(10_000, "j", &[("n0", 1)]);
    // The launcher's clock runs 9 s behind the decision service's.
    h.start(1_000, "j");
    let j = h.state.load("n0").unwrap().holding("j").unwrap().clone();
    assert!(j.holder.started);
    assert_eq!(j.holder.start_ms, 10_000);
    assert_eq!(j.reclaim_ms, 10_000 + HOUR);
}

#[test]
fn a_start_stamped_far_ahead_of_its_stored_time_counts_from_a_minute_after_it() {
    use fairshare_model::logtime::MAX_AHEAD_OF_LOG_MS;
    let mut h = H::new();
    h.node("n0", 8);
    h.submit(100, "j", "a", 1, 3600);
    h.place(10_000, "j", &[("n0", 1)]);
    h.submit(100, "k", "a", 1, 3600);
    h.place(10_000, "k", &[("n0", 1)]);
    h.submit(100, "l", "a", 1, 3600);
    h.place(10_000, "l", &[("n0", 1)]);
    // Two launchers: one whose clock runs a day ahead of the server's, stored at 20 s, and one
    // stamping the end of time.
    let stored = 20_000;
    let ahead = pb::Event {
        at_ms: stored + 24 * HOUR,
        body: Some(started("j")),
    };
    h.state.apply_stored(20, &ahead, Some(stored)).unwrap();
    let forever = pb::Event {
        at_ms: i64::MAX,
        body: Some(started("k")),
    };
    h.state.apply_stored(21, &forever, Some(stored)).unwrap();
    for id in ["j", "k"] {
        let held = h.state.load("n0").unwrap().holding(id).unwrap().clone();
        assert!(held.holder.started);
        assert_eq!(held.holder.start_ms, stored + MAX_AHEAD_OF_LOG_MS, "{id}");
        assert_eq!(
            held.reclaim_ms,
            stored + MAX_AHEAD_OF_LOG_MS + HOUR,
            "{id}: protected a minute past its stored time plus its minimum runtime"
        );
    }
    // A clock a few seconds ahead keeps its own time.
    let slightly = pb::Event {
        at_ms: stored + 5_000,
        body: Some(started("l")),
    };
    h.state.apply_stored(30, &slightly, Some(stored)).unwrap();
    let held = h.state.load("n0").unwrap().holding("l").unwrap().clone();
    assert_eq!(held.holder.start_ms, stored + 5_000);
}

#[test]
fn placement_holds_gpus_and_start_refines_when_they_are_reclaimable() {
    let mut h = H::new();
    h.node("n0", 8);
    h.submit(100, "j", "a", 3, 3600);
    h.submit(100, "u", "a", 2, 0);
    assert_eq!(h.state.queued_len(), 2);
    h.place(1_000, "j", &[("n0", 2), ("n0", 1)]);
    h.place(1_000, "u", &[("n0", 2)]);
    assert_eq!(h.state.queued_len(), 0);
    let load = h.state.load("n0").unwrap();
    assert_eq!(load.used, 5);
    let j = load.holding("j").unwrap();
    assert_eq!((j.gpus, j.reclaim_ms), (3, 1_000 + HOUR));
    assert_eq!(
        j.holder,
        Holder {
            allocation: "a".into(),
            min_runtime_ms: HOUR,
            start_ms: 1_000,
            started: false,
            resumable: true,
            preempt_deadline_ms: None,
            gpus: 3,
            account: None,
        }
    );
    // A tree set later resolves the holder's account.
    h.tree(vec![leaf("a", 1)]);
    let a = h.state.budget_tree().unwrap().allocation("a");
    assert!(a.is_some());
    let load = h.state.load("n0").unwrap();
    assert_eq!(load.holding("j").unwrap().holder.account, a);
    assert_eq!(load.holding("u").unwrap().reclaim_ms, RECLAIMABLE_AT_ONCE);
    h.start(5_000, "j");
    assert_eq!(
        h.state.load("n0").unwrap().holding("j").unwrap().reclaim_ms,
        5_000 + HOUR
    );
    // A preemption deadline before the end of the minimum runtime brings it forward.
    h.ok(
        6_000,
        Body::PreemptionOrdered(pb::PreemptionOrdered {
            job_id: "j".into(),
            grace_deadline_ms: 9_000,
            ..Default::default()
        }),
    );
    let j = h.state.load("n0").unwrap().holding("j").unwrap();
    assert_eq!(j.reclaim_ms, 9_000);
    // The holder copy follows the start and the order.
    assert_eq!(
        (
            j.holder.start_ms,
            j.holder.started,
            j.holder.preempt_deadline_ms
        ),
        (5_000, true, Some(9_000))
    );
    // A checkpoint does not carry the holder copies; loading one fills them in again.
    let bytes = bincode::serialize(&h.state).unwrap();
    let restored: DecisionState = bincode::deserialize(&bytes).unwrap();
    assert_eq!(restored, h.state);
    // Placing again is refused and changes nothing.
    let before = h.state.clone();
    assert!(matches!(
        h.apply(
            7_000,
            Body::JobPlaced(pb::JobPlaced {
                job_id: "j".into(),
                nodes: vec![pb::NodeGpus {
                    node: "n0".into(),
                    gpus: 3
                }],
                basis: None,
            })
        ),
        Err(Ignored::WrongStatus { .. })
    ));
    let mut after = h.state.clone();
    // Only the sequence moved.
    assert_eq!(after.last_applied(), before.last_applied() + 1);
    after.last_applied = before.last_applied();
    assert_eq!(after, before);
    h.ok(8_000, finished("j"));
    h.ok(8_000, finished("u"));
    assert!(h.state.load("n0").is_none());
    assert!(h.state.job("j").is_none());
}

#[test]
fn resumable_jobs_are_requeued_with_their_original_submit_time() {
    let mut h = H::new();
    h.node("n0", 8);
    h.submit_full(100, "r", "a", 1, 4, 3600, 2, true);
    h.submit_full(200, "n", "a", 1, 4, 3600, 2, false);
    h.place(1_000, "r", &[("n0", 4)]);
    h.place(1_000, "n", &[("n0", 4)]);
    h.start(1_100, "r");
    h.ok(9_000, preempted("r"));
    h.ok(9_000, preempted("n"));
    assert!(h.state.load("n0").is_none(), "both freed their GPUs");
    assert_eq!(h.state.job("r").unwrap().status, JobStatus::Preempted);
    // Not resumable: the job has ended and cannot come back.
    assert!(h.state.job("n").is_none());
    assert!(matches!(
        h.apply(9_500, requeued("n")),
        Err(Ignored::UnknownJob { .. })
    ));
    h.ok(10_000, requeued("r"));
    let q = h.state.queues().get("a").unwrap();
    let key = q.allocated.keys().next().unwrap();
    assert_eq!(
        (&*key.job_id, key.submitted_ms, key.priority.0),
        ("r", 100, 2)
    );
    // Requeue is only from preempted.
    assert!(matches!(
        h.apply(10_001, requeued("r")),
        Err(Ignored::WrongStatus { .. })
    ));
}

#[test]
fn cancelled_queued_jobs_leave_the_queue() {
    let mut h = H::new();
    h.submit(100, "j", "a", 1, 60);
    h.ok(
        200,
        Body::JobCancelled(pb::JobCancelled {
            job_id: "j".into(),
            ..Default::default()
        }),
    );
    assert_eq!(h.state.queued_len(), 0);
    assert!(h.state.queues().is_empty());
    assert!(matches!(
        h.apply(300, finished("j")),
        Err(Ignored::UnknownJob { .. })
    ));
}

#[test]
fn invalid_inputs_are_refused_whole() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    let tree = h.state.budget_tree().cloned();
    // Duplicate sibling names: refused, the tree in force stays.
    let bad = Body::BudgetTreeSet(pb::BudgetTreeSet {
        cluster: CLUSTER.into(),
        accounts: vec![leaf("x", 1), leaf("x", 2)],
    });
    assert!(matches!(
        h.apply(0, bad),
        Err(Ignored::InvalidBudgetTree(_))
    ));
    assert_eq!(h.state.budget_tree().cloned(), tree);
    // Negative minimum runtime, missing spec.
    let neg = Body::JobSubmitted(pb::JobSubmitted {
        job_id: "j".into(),
        spec: Some(pb::JobSpec {
            cluster: CLUSTER.into(),
            allocation: "a".into(),
            gpus: 1,
            min_runtime_s: -1,
            ..Default::default()
        }),
        shape: Some(pb::Shape {
            nodes: 1,
            gpus_per_node: 1,
        }),
        ..Default::default()
    });
    assert!(matches!(h.apply(0, neg), Err(Ignored::Invalid { .. })));
    let nospec = Body::JobSubmitted(pb::JobSubmitted {
        job_id: "k".into(),
        ..Default::default()
    });
    assert!(matches!(h.apply(0, nospec), Err(Ignored::Invalid { .. })));
    assert_eq!(h.state.queued_len(), 0);
    // The same id twice: the first stands.
    h.submit(1, "d", "a", 1, 60);
    let again = Body::JobSubmitted(pb::JobSubmitted {
        job_id: "d".into(),
        spec: Some(pb::JobSpec {
            cluster: CLUSTER.into(),
            allocation: "a".into(),
            gpus: 4,
            min_runtime_s: 60,
            ..Default::default()
        }),
        shape: None,
        ..Default::default()
    });
    assert!(matches!(
        h.apply(2, again),
        Err(Ignored::DuplicateJob { .. })
    ));
    assert_eq!(h.state.job("d").unwrap().request.shape.gpus_per_node, 1);
}

#[test]
fn shape_is_resolved_when_a_producer_left_it_out() {
    let mut h = H::new();
    h.node("n0", 8);
    h.node("n1", 8);
    let body = Body::JobSubmitted(pb::JobSubmitted {
        job_id: "m".into(),
        spec: Some(pb::JobSpec {
            cluster: CLUSTER.into(),
            allocation: "a".into(),
            gpus: 16,
            min_runtime_s: 60,
            ..Default::default()
        }),
        shape: None,
        ..Default::default()
    });
    h.ok(0, body);
    let shape = h.state.job("m").unwrap().request.shape;
    assert_eq!((shape.nodes, shape.gpus_per_node), (2, 8));
}

#[test]
fn a_snapshot_from_a_clock_that_ran_ahead_does_not_freeze_usage() {
    let mut h = H::new();
    h.node("n0", 8);
    // The accounting service's clock jumps 100 h ahead for one snapshot, then is set right.
    h.snapshot(100 * HOUR, &[("a", 5, 10)]);
    h.node("n1", 8);
    h.snapshot(2 * HOUR, &[("a", 7, 10)]);
    let usage = h.state.usage().unwrap();
    assert_eq!(usage.window_end_ms, 2 * HOUR);
    let held_through = usage.through_sequence;
    let snapshot = |window_end_ms, through_sequence| {
        Body::UsageSnapshot(pb::UsageSnapshot {
            cluster: CLUSTER.into(),
            window_end_ms,
            through_sequence,
            ..Default::default()
        })
    };
    // Older by both the clock and the log: a late copy, refused.
    assert!(matches!(
        h.apply(0, snapshot(HOUR, held_through - 1)),
        Err(Ignored::StaleSnapshot { .. })
    ));
    // A later clock on less of the log (an instance that folds this cluster alone, whose
    // position is the cluster's last event): taken.
    h.ok(0, snapshot(3 * HOUR, held_through - 1));
    assert_eq!(h.state.usage().unwrap().window_end_ms, 3 * HOUR);
}

/// Set to the accounting service's window, the state refuses snapshots of another window, so
/// a second accounting instance run with another `--window` cannot take turns with the first
/// at setting the ranking usage; unset, it takes any window.
#[test]
fn snapshots_of_another_window_are_refused_once_the_window_is_set() {
    let week = 7 * 24 * HOUR;
    let of = |window_end_ms, window_ms, charged| {
        Body::UsageSnapshot(pb::UsageSnapshot {
            cluster: CLUSTER.into(),
            window_end_ms,
            window_ms,
            allocations: vec![pb::AllocationUsage {
                allocation: "a".into(),
                charged_gpu_ms: charged,
                allocated_gpu_ms: 10,
            }],
            ..Default::default()
        })
    };
    let mut h = H::new();
    h.state.set_usage_window_ms(Some(week));
    h.ok(HOUR, of(HOUR, week, 5));
    // Newer, but of a 14-day window: refused, the week's usage stays.
    assert_eq!(
        h.apply(2 * HOUR, of(2 * HOUR, 2 * week, 9)),
        Err(Ignored::OtherWindow {
            window_ms: 2 * week,
            expected_ms: week,
        })
    );
    let refused = h.apply(2 * HOUR, of(2 * HOUR, 2 * week, 9)).unwrap_err();
    assert!(
        refused
            .to_string()
            .starts_with("usage snapshot of a 14 d window, where this service takes 7 d ones"),
        "{refused}"
    );
    let usage = h.state.usage().unwrap();
    assert_eq!((usage.window_end_ms, usage.window_ms), (HOUR, week));
    assert_eq!(usage.by_allocation["a"].charged_gpu_ms, 5);
    // The next one of the week's window is taken.
    h.ok(3 * HOUR, of(3 * HOUR, week, 6));
    assert_eq!(
        h.state.usage().unwrap().by_allocation["a"].charged_gpu_ms,
        6
    );
    // Unset, any window is taken (the newest).
    let mut any = H::new();
    any.ok(HOUR, of(HOUR, week, 5));
    any.ok(2 * HOUR, of(2 * HOUR, 2 * week, 9));
    assert_eq!(any.state.usage().unwrap().window_ms, 2 * week);
}

#[test]
fn stale_snapshots_and_past_maintenance_windows_are_dropped() {
    let mut h = H::new();
    h.snapshot(2 * HOUR, &[("a", 5, 10)]);
    assert!(matches!(
        h.apply(
            0,
            Body::UsageSnapshot(pb::UsageSnapshot {
                cluster: CLUSTER.into(),
                window_end_ms: HOUR,
                ..Default::default()
            })
        ),
        Err(Ignored::StaleSnapshot { .. })
    ));
    assert_eq!(h.state.usage().unwrap().window_end_ms, 2 * HOUR);
    h.node("n0", 8);
    h.maintenance(0, &["n0"], HOUR, 2 * HOUR);
    h.maintenance(0, &["n0"], 5 * HOUR, 6 * HOUR);
    assert_eq!(h.state.maintenance("n0").len(), 2);
    // Scheduling at 3 h forgets the window that ended at 2 h.
    h.maintenance(3 * HOUR, &["n0"], 4 * HOUR, 5 * HOUR);
    let starts: Vec<i64> = h
        .state
        .maintenance("n0")
        .iter()
        .map(|w| w.start_ms)
        .collect();
    assert_eq!(starts, [4 * HOUR, 5 * HOUR]);
    // An empty window is refused.
    let empty = Body::MaintenanceScheduled(pb::MaintenanceScheduled {
        cluster: CLUSTER.into(),
        nodes: vec!["n0".into()],
        start_ms: 7 * HOUR,
        end_ms: 7 * HOUR,
        reason: String::new(),
    });
    assert_eq!(
        h.apply(3 * HOUR, empty),
        Err(Ignored::EmptyWindow {
            start_ms: 7 * HOUR,
            end_ms: 7 * HOUR
        })
    );
    assert_eq!(h.state.maintenance("n0").len(), 2);
}

#[test]
fn replay_with_redeliveries_equals_a_clean_fold() {
    // Record a log through the harness, then fold it again with every event delivered twice
    // and an old one re-sent late.
    let mut h = H::new();
    h.tree(vec![leaf("a", 1)]);
    h.node("n0", 8);
    h.submit(10, "j1", "a", 2, 60);
    h.submit(20, "j2", "a", 2, 60);
    h.place(30, "j1", &[("n0", 2)]);
    h.start(40, "j1");
    h.ok(50, finished("j1"));
    h.place(60, "j2", &[("n0", 2)]);
    let log = h.log.clone();
    let mut twice = DecisionState::new(CLUSTER);
    for (seq, e) in &log {
        twice.apply(*seq, e).unwrap();
        assert!(matches!(
            twice.apply(*seq, e),
            Err(Ignored::Duplicate { .. })
        ));
    }
    assert!(twice.apply(log[2].0, &log[2].1).is_err());
    assert_eq!(twice, h.state);
    assert_eq!(twice.load("n0").unwrap().used, 2);
    assert_eq!(twice.queued_len(), 0);
}

#[test]
fn the_node_walk_pairs_registered_nodes_with_their_loads() {
    let mut h = H::new();
    h.node("n1", 8);
    h.node("n3", 8);
    for id in ["j1", "j2", "j3"] {
        h.submit(10, id, "a", 2, 60);
    }
    // A placement may name a node before it is registered (n2), or one never registered (n0).
    h.place(20, "j1", &[("n2", 2)]);
    h.place(20, "j2", &[("n0", 1), ("n3", 1)]);
    let rows = |s: &DecisionState| -> Vec<(String, u32)> {
        s.nodes_with_loads()
            .map(|r| (r.name.to_owned(), r.used()))
            .collect()
    };
    let want = |v: &[(&str, u32)]| -> Vec<(String, u32)> {
        v.iter().map(|(n, g)| (n.to_string(), *g)).collect()
    };
    assert_eq!(rows(&h.state), want(&[("n1", 0), ("n3", 1)]));
    h.node("n2", 8);
    assert_eq!(rows(&h.state), want(&[("n1", 0), ("n2", 2), ("n3", 1)]));
    h.place(30, "j3", &[("n1", 2)]);
    assert_eq!(rows(&h.state), want(&[("n1", 2), ("n2", 2), ("n3", 1)]));
    h.ok(40, finished("j1"));
    assert_eq!(rows(&h.state), want(&[("n1", 2), ("n2", 0), ("n3", 1)]));
    h.ok(
        50,
        Body::NodeRemoved(pb::NodeRemoved {
            cluster: CLUSTER.into(),
            node: "n3".into(),
        }),
    );
    assert_eq!(rows(&h.state), want(&[("n1", 2), ("n2", 0)]));
    h.ok(60, finished("j2"));
    h.ok(60, finished("j3"));
    assert_eq!(rows(&h.state), want(&[("n1", 0), ("n2", 0)]));
}

/// Re-holding a job in place (a start, an order) leaves the state equal to releasing it and
/// holding it again, as the fold did before: for a node holding only that job, a node shared
/// with others, a multi-node job, unallocated work, and a node not registered (yet).
#[test]
fn re_holding_in_place_equals_releasing_and_holding_again() {
    let mut h = H::new();
    h.tree(vec![leaf("a", 1), leaf("b", 1)]);
    for n in ["n0", "n1", "n2", "n3"] {
        h.node(n, 8);
    }
    h.submit(100, "alone", "a", 8, 3600);
    h.submit(100, "shared", "b", 2, 1800);
    h.submit(100, "wide", "a", 16, 3600);
    h.submit(100, "free", "b", 1, 0);
    h.submit(100, "ghost", "b", 2, 600);
    h.place(1_000, "alone", &[("n0", 8)]);
    h.place(1_000, "shared", &[("n1", 2)]);
    h.place(1_000, "free", &[("n1", 1)]);
    h.place(1_000, "wide", &[("n2", 8), ("n3", 8)]);
    h.place(1_000, "ghost", &[("n9", 2)]);
    for id in ["alone", "shared", "wide", "free", "ghost"] {
        let (key, job) = h.state.jobs.get_key_value(id).unwrap();
        let (key, job) = (key.clone(), job.clone());
        let JobStatus::Placed(placed) = &job.status else {
            panic!("{id} is placed");
        };
        let mut started = placed.clone();
        started.start_ms += 4_000;
        started.started = true;
        let mut ordered = started.clone();
        ordered.preempt_deadline_ms = Some(90_000);
        for changed in [started, ordered] {
            let mut in_place = h.state.clone();
            in_place.rehold(&key, &job, &changed);
            let mut again = h.state.clone();
            again.release(&key, &job, placed);
            again.hold(&key, &job, &changed);
            assert_eq!(in_place, again, "{id}: {changed:?}");
            assert_ne!(in_place, h.state, "{id}: the holding changed");
        }
    }
}
