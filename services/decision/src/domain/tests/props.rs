//! Properties of `decide` over random clusters, checked against an independent recount of the
//! state (not against the pool the cycle used).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::support::{H, HOUR, MIN, acc, leaf};
use crate::domain::state::{JobStatus, MAINTENANCE_LEAD_MS};
use crate::domain::{Decision, WaitReason, decide, decide_placements};
use fairshare_testkit::Rng;

const NOW: i64 = 50 * HOUR;
const LEAVES: [&str; 5] = ["g/a", "g/b", "h/c", "h/d", "zz-unknown"];

struct Scenario {
    h: H,
    /// Node name -> GPUs.
    nodes: BTreeMap<String, u32>,
}

fn scenario(seed: u64) -> Scenario {
    let mut r = Rng(seed | 1);
    let mut h = H::new();
    let s = |r: &mut Rng| r.below(4);
    h.tree(vec![
        acc(
            "g",
            s(&mut r),
            vec![leaf("a", s(&mut r)), leaf("b", s(&mut r))],
        ),
        acc(
            "h",
            s(&mut r),
            vec![leaf("c", s(&mut r)), leaf("d", s(&mut r))],
        ),
    ]);
    let mut nodes = BTreeMap::new();
    for i in 0..(1 + r.below(8)) {
        let name = format!("n{i:02}");
        let gpus = if r.below(4) == 0 { 4 } else { 8 };
        h.node(&name, gpus);
        nodes.insert(name.clone(), gpus);
        if r.below(6) == 0 {
            h.cordon(&name);
        }
        if r.below(5) == 0 {
            let start = NOW - HOUR + r.below(6) as i64 * HOUR;
            h.maintenance(
                NOW - 2 * HOUR,
                &[&name],
                start,
                start + (1 + r.below(3) as i64) * HOUR,
            );
        }
    }
    let rows: Vec<(&str, u64, u64)> = LEAVES[..4]
        .iter()
        .map(|l| {
            (
                *l,
                r.below(100) * HOUR as u64,
                r.below(3) * 100 * HOUR as u64,
            )
        })
        .collect();
    if r.below(4) != 0 {
        h.snapshot(NOW - HOUR, &rows);
    }
    let mrs = [0, 15 * 60, 3600, 4 * 3600];
    // Running work: fill part of each node.
    let mut job = 0;
    for (name, &gpus) in &nodes.clone() {
        let mut left = gpus;
        while left > 0 && r.below(3) != 0 {
            let g = 1 + r.below(u64::from(left)) as u32;
            left -= g;
            job += 1;
            let id = format!("r{job}");
            let start = NOW - r.below(5 * 60) as i64 * MIN;
            let alloc = LEAVES[r.below(4) as usize];
            h.running(start, &id, alloc, mrs[r.below(4) as usize], &[(name, g)]);
        }
    }
    // Queue.
    for j in 0..r.below(40) {
        let id = format!("q{j:03}");
        let alloc = LEAVES[r.below(5) as usize];
        let (n, gpn) = if r.below(6) == 0 {
            (2 + r.below(2) as u32, 8)
        } else {
            (1, 1 + r.below(8) as u32)
        };
        let mr = mrs[r.below(4) as usize];
        h.submit_full(
            NOW - 1000 + j as i64,
            &id,
            alloc,
            n,
            gpn,
            mr,
            r.below(3) as i32,
            true,
        );
    }
    Scenario { h, nodes }
}

/// Free GPUs per node after the decision, recounted from the state and the placements.
fn free_after(sc: &Scenario, d: &Decision) -> BTreeMap<String, i64> {
    let mut free: BTreeMap<String, i64> = sc
        .nodes
        .iter()
        .map(|(n, g)| {
            let used = sc.h.state.load(n).map_or(0, |l| i64::from(l.used));
            (n.clone(), i64::from(*g) - used)
        })
        .collect();
    for p in &d.placements {
        for n in &p.nodes {
            *free.get_mut(n.node).unwrap() -= i64::from(n.gpus);
        }
    }
    free
}

/// Whether node `n` takes work protected until `until` at NOW: a window closes its node
/// [`MAINTENANCE_LEAD_MS`] before it starts.
fn takes(sc: &Scenario, n: &str, until: i64) -> bool {
    !sc.h.state.inventory().nodes()[n].cordoned
        && sc.h.state.maintenance(n).iter().all(|w| {
            let closes = w.start_ms - MAINTENANCE_LEAD_MS;
            w.end_ms <= NOW || (closes > NOW && until <= closes)
        })
}

fn check(sc: &Scenario, d: &Decision) -> Result<(), TestCaseError> {
    let state = &sc.h.state;
    // 1. Every queued job is either placed or waiting, exactly once.
    let mut queued = BTreeSet::new();
    for q in state.queues().values() {
        for k in q.allocated.keys().chain(q.unallocated.keys()) {
            queued.insert(k.job_id.to_string());
        }
    }
    let mut seen = BTreeSet::new();
    for id in d
        .placements
        .iter()
        .map(|p| &p.job_id)
        .chain(d.waiting.iter().map(|w| &w.job_id))
    {
        prop_assert!(seen.insert(id.to_string()), "{} decided twice", id);
    }
    prop_assert_eq!(&seen, &queued);

    // 2-3. No node over capacity; placements match shapes and respect cordons/maintenance.
    let free = free_after(sc, d);
    for (n, f) in &free {
        prop_assert!(*f >= 0, "node {} over capacity: {}", n, f);
    }
    for p in &d.placements {
        let job = state.job(p.job_id).unwrap();
        let shape = job.request.shape;
        let until = NOW + job.request.min_runtime_ms;
        prop_assert_eq!(p.nodes.len(), shape.nodes as usize);
        let distinct: BTreeSet<_> = p.nodes.iter().map(|n| &n.node).collect();
        prop_assert_eq!(distinct.len(), p.nodes.len());
        for n in &p.nodes {
            prop_assert_eq!(n.gpus, shape.gpus_per_node);
            prop_assert!(
                takes(sc, n.node, until),
                "{} on {} it may not use",
                p.job_id,
                n.node
            );
            if shape.nodes > 1 {
                prop_assert_eq!(sc.nodes[n.node], shape.gpus_per_node);
                prop_assert!(state.load(n.node).is_none(), "multi-node on a busy node");
            }
        }
        prop_assert!(
            state
                .budget_tree()
                .unwrap()
                .allocation(&job.allocation)
                .is_some()
        );
    }

    // 4. The reservation is still feasible after everything placed behind it.
    if let Some(r) = &d.reservation {
        for rn in &r.nodes {
            prop_assert!(!state.inventory().nodes()[rn.node].cordoned);
            let mut held: i64 = 0;
            if let Some(load) = state.load(rn.node) {
                held += load
                    .holdings
                    .iter()
                    .map(|(_, h)| h)
                    .filter(|h| h.reclaim_ms > r.start_ms)
                    .map(|h| i64::from(h.gpus))
                    .sum::<i64>();
            }
            for p in &d.placements {
                let job = state.job(p.job_id).unwrap();
                let reclaim = if job.request.min_runtime_ms == 0 {
                    i64::MIN
                } else {
                    NOW + job.request.min_runtime_ms
                };
                if reclaim > r.start_ms {
                    held += p
                        .nodes
                        .iter()
                        .filter(|n| n.node == rn.node)
                        .map(|n| i64::from(n.gpus))
                        .sum::<i64>();
                }
            }
            prop_assert!(
                i64::from(sc.nodes[rn.node]) - held >= i64::from(rn.gpus),
                "reservation on {} overbooked",
                rn.node
            );
        }
    }

    // 5. No GPU idles while work it fits waits (except for the reservation's sake).
    for w in &d.waiting {
        if matches!(
            w.reason,
            WaitReason::BlockedByReservation { .. }
                | WaitReason::UnknownAllocation
                | WaitReason::NoBudgetTree
        ) {
            continue;
        }
        let job = state.job(w.job_id).unwrap();
        let shape = job.request.shape;
        let until = NOW + job.request.min_runtime_ms;
        let usable = free.iter().filter(|(n, _)| takes(sc, n, until));
        let fits = if shape.nodes <= 1 {
            usable
                .clone()
                .any(|(_, f)| *f >= i64::from(shape.gpus_per_node))
        } else {
            usable
                .filter(|(n, f)| {
                    sc.nodes[*n] == shape.gpus_per_node && **f == i64::from(shape.gpus_per_node)
                })
                .count()
                >= shape.nodes as usize
        };
        prop_assert!(!fits, "{} waits ({}) but fits", w.job_id, w.reason.code());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn decisions_are_sound_and_deterministic(seed in any::<u64>()) {
        let sc = scenario(seed);
        let d = decide(&sc.h.state, NOW);
        check(&sc, &d)?;
        // A clone of the state (a rebuilt one) gives the same decision.
        let copy = sc.h.state.clone();
        prop_assert_eq!(&d, &decide(&copy, NOW));
        // Skipping the waiting reasons changes nothing that is placed or reserved.
        let quick = decide_placements(&sc.h.state, NOW);
        prop_assert_eq!(&quick.placements, &d.placements);
        prop_assert_eq!(&quick.reservation, &d.reservation);
        prop_assert_eq!(&quick.ranking, &d.ranking);
        prop_assert!(quick.waiting.is_empty());
        // A cycle places only queued shapes that fit the free GPUs.
        if !sc.h.state.any_queued_shape_fits() {
            prop_assert!(d.placements.is_empty(), "placed though no queued shape fits");
        }
    }

    /// Re-holding a running job in place (its start confirmed, an order given) leaves the
    /// state equal to releasing it and holding it again, on random clusters (cordons,
    /// maintenance, shared nodes, unallocated work).
    #[test]
    fn re_holding_in_place_equals_releasing_and_holding_again(seed in any::<u64>()) {
        let sc = scenario(seed);
        let mut r = Rng(seed.rotate_left(17) | 1);
        let state = &sc.h.state;
        for (id, job) in &state.jobs {
            let JobStatus::Placed(placed) = &job.status else { continue };
            let mut changed = placed.clone();
            changed.start_ms += r.below(10 * MIN as u64) as i64;
            changed.started = r.below(2) == 0;
            changed.preempt_deadline_ms = (r.below(2) == 0).then(|| NOW + r.below(HOUR as u64) as i64);
            let mut in_place = state.clone();
            in_place.rehold(id, job, &changed);
            let mut again = state.clone();
            again.release(id, job, placed);
            again.hold(id, job, &changed);
            prop_assert_eq!(&in_place, &again, "job {}", id);
        }
    }
}
