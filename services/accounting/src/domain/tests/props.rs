//! Property tests: for random event streams, every answer of the fold equals the brute-force
//! recomputation ([`super::brute`]) from the full list of intervals, at several `now`s and
//! part-way through the stream (after evictions have happened).
//!
//! Streams mix: two clusters, jobs on allocations that are leaves, inner accounts in another
//! tree, or in no tree; unallocated jobs; preemption and requeue; long silent gaps (jobs longer
//! than the window, hours closing in bulk); nodes joining, resizing and leaving; budget trees
//! changing, including invalid ones; event times running backwards (clamped); redeliveries with
//! their old sequence; republications with a new sequence (double starts and stops, stale
//! submissions); events for unknown jobs; events accounting does not use; preemption orders
//! whose grace deadlines pass before the job's stop is reported, or not.

use fairshare_events::pb;
use proptest::prelude::*;

use super::brute::Brute;
use super::support::{self, *};
use crate::domain::{FoldConfig, HOUR_MS, UsageFold};

const CLUSTERS: [&str; 2] = ["c0", "c1"];
const ALLOCS: [&str; 6] = [
    "org/p1/t1",
    "org/p1/t2",
    "org/p2/t3",
    "solo",
    "ghost/x",
    "org/p1/t2/x",
];
const QUERY_PATHS: [&str; 11] = [
    "org",
    "org/p1",
    "org/p2",
    "org/p1/t1",
    "org/p1/t2",
    "org/p1/t2/x",
    "org/p2/t3",
    "solo",
    "ghost",
    "ghost/x",
    "nope",
];
/// Job events name one of the last few jobs submitted (or one not submitted yet).
const JOBS: u8 = 6;

#[derive(Debug, Clone)]
enum Op {
    Wait(i64),
    /// The next event is stamped this much before the current time.
    Skew(i64),
    /// A new job (ids are never reused, as UUIDv7 ids are not).
    Submit {
        cluster: usize,
        alloc: usize,
        nodes: u32,
        gpn: u32,
        allocated: bool,
        /// Whether a preemption requeues it (or ends it).
        resumable: bool,
    },
    /// The decision service's placement (the launcher may start the job, or a preemption
    /// order may stop it first).
    Place(u8),
    Start(u8),
    Finish(u8),
    Fail(u8),
    Cancel(u8),
    Preempt(u8),
    Requeue(u8),
    /// A preemption order with this grace (its deadline may be before the clock already, when
    /// the event is stamped back).
    Order(u8, i64),
    UnknownJob,
    Node {
        cluster: usize,
        node: u8,
        gpus: u32,
    },
    RemoveNode {
        cluster: usize,
        node: u8,
    },
    Tree {
        cluster: usize,
        shape: u8,
        shares: [u64; 7],
    },
    BadTree(usize),
    Redeliver(usize),
    Republish(usize),
}

fn op(window: i64) -> impl Strategy<Value = Op> {
    let job = 0..JOBS;
    prop_oneof![
        4 => prop_oneof![
            0i64..1_000,
            0i64..2 * HOUR_MS,
            0i64..(3 * window).max(2),
        ]
        .prop_map(Op::Wait),
        1 => (1i64..HOUR_MS).prop_map(Op::Skew),
        8 => (
            0..2usize,
            0..ALLOCS.len(),
            1u32..3,
            1u32..9,
            prop::bool::weighted(0.75),
            prop::bool::weighted(0.75),
        )
            .prop_map(|(cluster, alloc, nodes, gpn, allocated, resumable)| Op::Submit {
                cluster, alloc, nodes, gpn, allocated, resumable
            }),
        4 => job.clone().prop_map(Op::Place),
        8 => job.clone().prop_map(Op::Start),
        2 => job.clone().prop_map(Op::Finish),
        1 => job.clone().prop_map(Op::Fail),
        1 => job.clone().prop_map(Op::Cancel),
        2 => job.clone().prop_map(Op::Preempt),
        2 => job.clone().prop_map(Op::Requeue),
        3 => (job.clone(), prop_oneof![Just(0i64), 0i64..60_000, 0i64..2 * HOUR_MS])
            .prop_map(|(j, grace)| Op::Order(j, grace)),
        1 => Just(Op::UnknownJob),
        3 => (0..2usize, 0u8..4, 0u32..17).prop_map(|(cluster, node, gpus)| Op::Node {
            cluster, node, gpus
        }),
        1 => (0..2usize, 0u8..4).prop_map(|(cluster, node)| Op::RemoveNode { cluster, node }),
        2 => (0..2usize, 0u8..3, prop::array::uniform7(0u64..4))
            .prop_map(|(cluster, shape, shares)| Op::Tree { cluster, shape, shares }),
        1 => (0..2usize).prop_map(Op::BadTree),
        2 => any::<usize>().prop_map(Op::Redeliver),
        2 => any::<usize>().prop_map(Op::Republish),
    ]
}

fn accounts(shape: u8, s: [u64; 7]) -> Vec<pb::Account> {
    let org = match shape {
        0 => acc(
            "org",
            s[0],
            vec![
                acc(
                    "p1",
                    s[1],
                    vec![acc("t1", s[2], vec![]), acc("t2", s[3], vec![])],
                ),
                acc("p2", s[4], vec![acc("t3", s[5], vec![])]),
            ],
        ),
        1 => acc(
            "org",
            s[0],
            vec![acc("p1", s[1], vec![acc("t1", s[2], vec![])])],
        ),
        _ => acc(
            "org",
            s[0],
            vec![acc(
                "p1",
                s[1],
                vec![
                    acc("t1", s[2], vec![]),
                    acc("t2", s[3], vec![acc("x", s[5], vec![])]),
                ],
            )],
        ),
    };
    vec![org, acc("solo", s[6], vec![])]
}

/// Job `n`'s id: canonical UUIDs (keyed by their bits) and plain text (keyed as text) alternate.
fn job_id(n: u32) -> String {
    if n.is_multiple_of(2) {
        format!("0190a6b2-3c4d-7e5f-8a9b-{n:012x}")
    } else {
        format!("j{n}")
    }
}

/// Turns ops into the delivered stream: `(sequence, event)` in delivery order, redeliveries
/// included with their old sequence.
fn stream(ops: &[Op], base: i64) -> Vec<(u64, pb::Event)> {
    let mut out: Vec<(u64, pb::Event)> = Vec::new();
    let mut now = base;
    let mut skew = 0;
    let mut seq = 0u64;
    let mut submitted = 0u32;
    let job = |j: u8, submitted: u32| job_id((submitted + 1).saturating_sub(u32::from(j)));
    for o in ops {
        let at = now - std::mem::take(&mut skew);
        let event = match o {
            Op::Wait(dt) => {
                now += dt;
                continue;
            }
            Op::Skew(d) => {
                skew = *d;
                continue;
            }
            Op::Submit {
                cluster,
                alloc,
                nodes,
                gpn,
                allocated,
                resumable,
            } => {
                submitted += 1;
                let e = submit(
                    at,
                    &job_id(submitted),
                    CLUSTERS[*cluster],
                    ALLOCS[*alloc],
                    *nodes,
                    *gpn,
                    if *allocated { 600 } else { 0 },
                );
                if *resumable { support::resumable(e) } else { e }
            }
            Op::Place(j) => placed(at, &job(*j, submitted)),
            Op::Start(j) => started(at, &job(*j, submitted)),
            Op::Finish(j) => finished(at, &job(*j, submitted)),
            Op::Fail(j) => failed(at, &job(*j, submitted)),
            Op::Cancel(j) => cancelled(at, &job(*j, submitted)),
            Op::Preempt(j) => preempted(at, &job(*j, submitted)),
            Op::Requeue(j) => requeued(at, &job(*j, submitted)),
            Op::Order(j, grace) => ordered(at, &job(*j, submitted), at + grace),
            Op::UnknownJob => finished(at, "nobody"),
            Op::Node {
                cluster,
                node: n,
                gpus,
            } => node(at, CLUSTERS[*cluster], &format!("n{n}"), *gpus),
            Op::RemoveNode { cluster, node: n } => {
                node_removed(at, CLUSTERS[*cluster], &format!("n{n}"))
            }
            Op::Tree {
                cluster,
                shape,
                shares,
            } => tree(at, CLUSTERS[*cluster], accounts(*shape, *shares)),
            Op::BadTree(cluster) => tree(at, CLUSTERS[*cluster], vec![]),
            Op::Redeliver(i) => {
                if out.is_empty() {
                    continue;
                }
                let old = out[i % out.len()].clone();
                out.push(old);
                continue;
            }
            Op::Republish(i) => {
                if out.is_empty() {
                    continue;
                }
                out[i % out.len()].1.clone()
            }
        };
        seq += 1;
        out.push((seq, event));
    }
    out
}

/// Compares every answer of the fold with the brute force for `cluster` at `now`.
fn check(fold: &UsageFold, brute: &Brute, cluster: &str, now: i64) -> Result<(), TestCaseError> {
    let brute = &brute.at(cluster, now);
    let report = fold
        .window(cluster, now)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let (allocations, subtrees) = brute.window_rows(cluster, now);
    prop_assert_eq!(&report.allocations, &allocations, "allocations at {}", now);
    prop_assert_eq!(&report.subtrees, &subtrees, "subtrees at {}", now);
    prop_assert_eq!(
        u128::from(report.capacity_gpu_ms),
        brute.capacity(cluster, now)
    );
    prop_assert_eq!(
        u128::from(report.unallocated_gpu_ms),
        brute.unallocated(cluster, now)
    );
    for path in QUERY_PATHS {
        let got = fold
            .account(cluster, path, now)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(
            u128::from(got.charged_gpu_ms),
            brute.charged(cluster, path, now, true),
            "charged {} at {}",
            path,
            now
        );
        prop_assert_eq!(
            u128::from(got.allocated_gpu_ms),
            brute.allocated(cluster, path, now - brute.window, now),
            "allocated {} at {}",
            path,
            now
        );
    }
    let ledger = fold
        .ledger(cluster, now)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let (rows, unallocated) = brute.ledger(cluster, now);
    prop_assert_eq!(&ledger.allocations, &rows, "ledger at {}", now);
    prop_assert_eq!(ledger.unallocated_delivered_gpu_ms, unallocated);
    Ok(())
}

fn case() -> impl Strategy<Value = (i64, i64, Vec<Op>)> {
    (
        // Windows up to the default 7 days too: the sweep period (a window's eighth, at
        // least an hour and at most a day) is longer than an hour only past 8 hours.
        prop_oneof![
            1 => Just(1i64),
            3 => 1_000i64..HOUR_MS,
            4 => HOUR_MS..6 * HOUR_MS,
            1 => 8 * HOUR_MS..3 * 24 * HOUR_MS,
            1 => Just(7 * 24 * HOUR_MS),
        ],
        // Epoch-aligned and unaligned starts, and times before 1970.
        prop_oneof![
            Just(0i64),
            -10 * HOUR_MS..10 * HOUR_MS,
            Just(1_700_000_123_456)
        ],
    )
        .prop_flat_map(|(window, base)| {
            (
                Just(window),
                Just(base),
                prop::collection::vec(op(window), 1..90),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn fold_equals_brute_force((window, base, ops) in case()) {
        let events = stream(&ops, base);
        let mut fold = UsageFold::new(FoldConfig::new(window as u64).unwrap());
        let mut brute = Brute::new(window);
        for (i, (seq, event)) in events.iter().enumerate() {
            fold.apply(*seq, event);
            brute.apply(*seq, event);
            // Part-way checks, after some evictions and hour closings have happened.
            if i % 15 == 14 {
                for cluster in brute.clusters() {
                    let clock = brute.clock(&cluster).unwrap_or(0);
                    prop_assert_eq!(fold.cluster(&cluster).and_then(|c| c.clock()), Some(clock));
                    check(&fold, &brute, &cluster, clock)?;
                }
            }
        }
        prop_assert_eq!(fold.counts().ignored(), brute.ignored);
        for cluster in brute.clusters() {
            let clock = brute.clock(&cluster).unwrap_or(0);
            for now in [
                clock,
                clock + 1,
                clock + window / 2,
                clock + window,
                clock + window + HOUR_MS + 7,
                clock + 3 * window,
            ] {
                check(&fold, &brute, &cluster, now)?;
            }
        }
    }

    /// A checkpoint (the state serialized as the shell writes it, with bincode) taken anywhere
    /// and restored gives exactly the state of an uninterrupted fold.
    #[test]
    fn checkpoint_and_restore_changes_nothing((window, base, ops) in case(), cut in any::<prop::sample::Index>()) {
        let events = stream(&ops, base);
        let cut = cut.index(events.len() + 1);
        let mut straight = UsageFold::new(FoldConfig::new(window as u64).unwrap());
        let mut first = straight.clone();
        for (seq, event) in &events[..cut] {
            first.apply(*seq, event);
        }
        let bytes = bincode::serialize(&first).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut restored: UsageFold =
            bincode::deserialize(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&restored, &first);
        for (seq, event) in &events[cut..] {
            restored.apply(*seq, event);
        }
        for (seq, event) in &events {
            straight.apply(*seq, event);
        }
        prop_assert_eq!(&restored, &straight);
    }

    /// A redelivered prefix (at-least-once delivery after a restart) changes nothing.
    #[test]
    fn redelivered_prefix_changes_nothing((window, base, ops) in case(), cut in any::<prop::sample::Index>()) {
        let events = stream(&ops, base);
        let mut once = UsageFold::new(FoldConfig::new(window as u64).unwrap());
        let mut twice = once.clone();
        let cut = cut.index(events.len() + 1);
        for (seq, event) in &events[..cut] {
            twice.apply(*seq, event);
        }
        for (seq, event) in &events {
            once.apply(*seq, event);
            twice.apply(*seq, event);
        }
        prop_assert_eq!(once.last_applied(), twice.last_applied());
        prop_assert_eq!(once.footprint(), twice.footprint());
        for cluster in once.cluster_names() {
            let now = once.cluster(cluster).and_then(|c| c.clock()).unwrap_or(0) + window / 3;
            prop_assert_eq!(once.window(cluster, now), twice.window(cluster, now));
            prop_assert_eq!(once.ledger(cluster, now), twice.ledger(cluster, now));
        }
    }
}
