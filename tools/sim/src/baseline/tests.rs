//! Tests of the baselines as a whole: every log is checked by replaying it (times never go
//! back, nothing is placed before it is submitted, on a cordoned node, or beyond a node's GPUs),
//! plus the behaviour all three share. Helpers here are used by the policies' own tests.

use std::collections::{BTreeMap, BTreeSet};

use fairshare_events::pb;
use fairshare_events::pb::event::Body;

use super::{Baseline, run};
use crate::setup::{EPOCH_MS, Setup};
use crate::workload::{Action, SimJob, TimedAction, Workload, job_id};

/// A minute, in ms.
pub(crate) const M: i64 = 60_000;
/// An hour, in ms.
pub(crate) const H: i64 = 60 * M;
const DAY: i64 = 24 * H;

fn leaves(teams: &[(&str, u64)]) -> Vec<pb::Account> {
    teams
        .iter()
        .map(|(name, share)| pb::Account {
            name: (*name).into(),
            share: *share,
            children: vec![],
        })
        .collect()
}

/// A budget of top-level allocations with these shares, for cluster "c1".
pub(crate) fn budget(teams: &[(&str, u64)]) -> pb::BudgetTreeSet {
    pb::BudgetTreeSet {
        cluster: "c1".into(),
        accounts: leaves(teams),
    }
}

/// `count` nodes `n000`... of `gpus` GPUs, these teams, 30 days.
pub(crate) fn setup(count: usize, gpus: u32, teams: &[(&str, u64)]) -> Setup {
    Setup::new(
        budget(teams),
        Setup::uniform_nodes("n", count, gpus),
        EPOCH_MS + 30 * DAY,
    )
    .unwrap()
}

/// Named nodes, these teams, 30 days.
pub(crate) fn setup_with_nodes(nodes: &[(&str, u32)], teams: &[(&str, u64)]) -> Setup {
    let nodes = nodes.iter().map(|(n, g)| ((*n).to_owned(), *g)).collect();
    Setup::new(budget(teams), nodes, EPOCH_MS + 30 * DAY).unwrap()
}

/// A budget change `at` ms after the epoch.
pub(crate) fn budget_action(at: i64, teams: &[(&str, u64)]) -> TimedAction {
    TimedAction {
        at_ms: EPOCH_MS + at,
        action: Action::SetBudget(budget(teams)),
    }
}

/// An operator action `at` ms after the epoch.
pub(crate) fn node_action(at: i64, action: Action) -> TimedAction {
    TimedAction {
        at_ms: EPOCH_MS + at,
        action,
    }
}

/// A job submitted `at` ms after the epoch, running `duration` ms.
pub(crate) fn job(
    name: &str,
    at: i64,
    duration: i64,
    allocation: &str,
    gpus: u32,
    priority: i32,
) -> SimJob {
    SimJob {
        name: name.into(),
        submit_ms: EPOCH_MS + at,
        duration_ms: duration,
        allocation: allocation.into(),
        user: "u".into(),
        gpus,
        min_runtime_ms: H,
        resumable: true,
        priority,
    }
}

/// Runs `policy` and checks its log (see [`check_log`]).
pub(crate) fn run_checked(
    policy: Baseline,
    setup: &Setup,
    jobs: Vec<SimJob>,
    actions: Vec<TimedAction>,
) -> Vec<pb::Event> {
    let log = run(policy, setup, &Workload::new(jobs, actions));
    check_log(setup, &log);
    log
}

/// Each started job's start (ms after the epoch) and nodes (name, GPUs), by job name.
pub(crate) type Starts = BTreeMap<String, (i64, Vec<(String, u32)>)>;

/// [`Starts`] of a log.
pub(crate) fn starts(log: &[pb::Event]) -> Starts {
    let mut names = BTreeMap::new();
    let mut out = BTreeMap::new();
    for e in log {
        match e.body.as_ref().unwrap() {
            Body::JobSubmitted(s) => {
                names.insert(s.job_id.clone(), s.spec.as_ref().unwrap().name.clone());
            }
            Body::JobPlaced(p) => {
                let nodes = p.nodes.iter().map(|n| (n.node.clone(), n.gpus)).collect();
                out.insert(names[&p.job_id].clone(), (e.at_ms - EPOCH_MS, nodes));
            }
            _ => {}
        }
    }
    out
}

/// The nodes the job named `name` was placed on, by name (from [`starts`]).
pub(crate) fn nodes_of<'a>(at: &'a Starts, name: &str) -> Vec<&'a str> {
    at[name].1.iter().map(|(n, _)| n.as_str()).collect()
}

/// Replays `log` and panics where it breaks the contract a real system keeps.
pub(crate) fn check_log(setup: &Setup, log: &[pb::Event]) {
    let initial = setup.initial_events(EPOCH_MS);
    assert_eq!(
        log[..initial.len()],
        initial[..],
        "the log starts with the setup"
    );
    let mut last = i64::MIN;
    let mut capacity: BTreeMap<String, u32> = BTreeMap::new();
    let mut used: BTreeMap<String, u32> = BTreeMap::new();
    let mut cordoned: BTreeSet<String> = BTreeSet::new();
    let mut shapes: BTreeMap<String, pb::Shape> = BTreeMap::new();
    let mut placed: BTreeMap<String, (i64, Vec<pb::NodeGpus>)> = BTreeMap::new();
    let mut running: BTreeSet<String> = BTreeSet::new();
    let mut finished: BTreeSet<String> = BTreeSet::new();
    for e in log {
        assert!(e.at_ms >= last, "time went back at {e:?}");
        assert!(e.at_ms <= setup.end_ms, "written after the end: {e:?}");
        last = e.at_ms;
        match e.body.as_ref().unwrap() {
            Body::NodeRegistered(n) => {
                capacity.insert(n.node.clone(), n.gpus);
            }
            Body::NodeCordoned(n) => {
                cordoned.insert(n.node.clone());
            }
            Body::NodeUncordoned(n) => {
                cordoned.remove(&n.node);
            }
            Body::JobSubmitted(s) => {
                let shape = s.shape.unwrap();
                assert!(shapes.insert(s.job_id.clone(), shape).is_none());
            }
            Body::JobPlaced(p) => {
                let shape = shapes.get(&p.job_id).expect("placed before submitted");
                assert!(!placed.contains_key(&p.job_id), "placed twice");
                assert_eq!(p.nodes.len(), shape.nodes as usize);
                let distinct: BTreeSet<&str> = p.nodes.iter().map(|n| n.node.as_str()).collect();
                assert_eq!(distinct.len(), p.nodes.len());
                for n in &p.nodes {
                    assert!(!cordoned.contains(&n.node), "placed on cordoned {}", n.node);
                    assert_eq!(n.gpus, shape.gpus_per_node);
                    if shape.nodes > 1 {
                        assert_eq!(
                            n.gpus, capacity[&n.node],
                            "multi-node jobs take whole nodes"
                        );
                    }
                    let u = used.entry(n.node.clone()).or_default();
                    *u += n.gpus;
                    assert!(*u <= capacity[&n.node], "{} over-committed", n.node);
                }
                placed.insert(p.job_id.clone(), (e.at_ms, p.nodes.clone()));
            }
            Body::JobStarted(s) => {
                assert_eq!(placed[&s.job_id].0, e.at_ms, "started when placed");
                assert!(running.insert(s.job_id.clone()));
            }
            Body::JobFinished(f) => {
                assert!(running.remove(&f.job_id), "finished without running");
                assert!(finished.insert(f.job_id.clone()));
                for n in &placed[&f.job_id].1 {
                    *used.get_mut(&n.node).unwrap() -= n.gpus;
                }
            }
            Body::BudgetTreeSet(_) | Body::MaintenanceScheduled(_) => {}
            other => panic!("a baseline wrote {other:?}"),
        }
    }
}

fn bodies_at(log: &[pb::Event], at: i64) -> Vec<&'static str> {
    log.iter()
        .filter(|e| e.at_ms == EPOCH_MS + at)
        .map(|e| match e.body.as_ref().unwrap() {
            Body::JobSubmitted(_) => "submitted",
            Body::JobPlaced(_) => "placed",
            Body::JobStarted(_) => "started",
            Body::JobFinished(_) => "finished",
            Body::NodeCordoned(_) => "cordoned",
            _ => "other",
        })
        .collect()
}

/// Unallocated work (minimum runtime 0) is scavenger work in every baseline: offered after
/// every allocated job of a pass, and outside quotas and decayed usage.
#[test]
fn unallocated_work_goes_after_allocated_work_and_charges_no_quota() {
    let scavenger = |name: &str, at: i64, team: &str, gpus: u32| SimJob {
        min_runtime_ms: 0,
        ..job(name, at, 2 * H, team, gpus, 9)
    };
    // Submitted together, the scavenger first and with the higher priority: the allocated job
    // (within b's quota of 4) still goes first, and the whole-node scavenger waits for it.
    let s = setup(1, 8, &[("a", 1), ("b", 1)]);
    for policy in Baseline::ALL {
        let jobs = vec![scavenger("free", 0, "a", 8), job("owed", 0, H, "b", 4, 0)];
        let at = starts(&run_checked(policy, &s, jobs, vec![]));
        assert_eq!((at["owed"].0, at["free"].0), (0, H), "{}", policy.name());
    }
    // Static quotas (4 GPUs each): a's scavenger on half the node leaves a's quota whole.
    let jobs = vec![scavenger("free", 0, "a", 4), job("a-own", M, H, "a", 4, 0)];
    let at = starts(&run_checked(Baseline::StaticQuotas, &s, jobs, vec![]));
    assert_eq!((at["free"].0, at["a-own"].0), (0, M));
}

#[test]
fn names() {
    let names: Vec<&str> = Baseline::ALL.iter().map(|b| b.name()).collect();
    assert_eq!(names, ["fifo", "static-quotas", "decayed-fair-share"]);
}

#[test]
fn best_fit_packs_two_half_jobs_on_one_node_leaving_a_whole_node() {
    let s = setup(2, 8, &[("a", 1)]);
    for policy in Baseline::ALL {
        let jobs = vec![
            job("half-1", 0, H, "a", 4, 0),
            job("half-2", 0, H, "a", 4, 0),
            job("whole", M, H, "a", 8, 0),
        ];
        let at = starts(&run_checked(policy, &s, jobs, vec![]));
        assert_eq!(at["half-1"].1, [("n000".to_owned(), 4)], "{policy:?}");
        assert_eq!(at["half-2"].1, [("n000".to_owned(), 4)], "{policy:?}");
        assert_eq!(at["whole"], (M, vec![("n001".to_owned(), 8)]), "{policy:?}");
    }
}

#[test]
fn multi_node_jobs_wait_for_whole_free_nodes() {
    let s = setup(3, 8, &[("a", 1)]);
    for policy in Baseline::ALL {
        let jobs = vec![
            job("one", 0, H, "a", 1, 0),
            job("two-nodes", M, H, "a", 16, 0),
            job("three-nodes", 2 * M, H, "a", 24, 0),
        ];
        let at = starts(&run_checked(policy, &s, jobs, vec![]));
        let nodes: Vec<_> = ["n001", "n002"].map(|n| (n.to_owned(), 8)).into();
        assert_eq!(at["two-nodes"], (M, nodes), "{policy:?}");
        assert_eq!(at["three-nodes"].0, M + H, "{policy:?}");
    }
}

#[test]
fn a_cordoned_node_gets_no_placement_until_uncordoned() {
    let s = setup(2, 8, &[("a", 1)]);
    let actions = vec![
        node_action(
            0,
            Action::Cordon {
                node: "n000".into(),
            },
        ),
        node_action(
            H,
            Action::Uncordon {
                node: "n000".into(),
            },
        ),
        node_action(
            2 * H,
            Action::Cordon {
                node: "n001".into(),
            },
        ),
    ];
    for policy in Baseline::ALL {
        let jobs = vec![
            job("small", 0, 10 * H, "a", 4, 0),
            job("full", M, H, "a", 8, 0),
        ];
        let log = run_checked(policy, &s, jobs, actions.clone());
        let at = starts(&log);
        // Best fit would pick n000 (a name tie) were it open.
        assert_eq!(at["small"], (0, vec![("n001".to_owned(), 4)]), "{policy:?}");
        assert_eq!(at["full"], (H, vec![("n000".to_owned(), 8)]), "{policy:?}");
    }
}

#[test]
fn at_one_instant_finishes_come_first_then_actions_then_submissions_then_placements() {
    let s = setup(1, 8, &[("a", 1)]);
    for policy in Baseline::ALL {
        let jobs = vec![
            job("first", 0, H, "a", 8, 0),
            job("second", H, H, "a", 8, 0),
        ];
        let actions = vec![node_action(
            H,
            Action::Cordon {
                node: "n999".into(),
            },
        )];
        let log = run_checked(policy, &s, jobs, actions);
        assert_eq!(
            bodies_at(&log, H),
            ["finished", "cordoned", "submitted", "placed", "started"],
            "{policy:?}"
        );
    }
}

#[test]
fn rejected_jobs_leave_no_trace() {
    let mut s = setup(2, 8, &[("a", 1)]);
    s.budget.accounts.push(pb::Account {
        name: "org".into(),
        share: 1,
        children: leaves(&[("team", 1)]),
    });
    s.tree = fairshare_model::budget::BudgetTree::from_accounts(&s.budget.accounts).unwrap();
    let jobs = vec![
        job("unknown-allocation", 0, H, "nobody", 1, 0),
        job("inner-account", 0, H, "org", 1, 0),
        job("not-whole-nodes", 0, H, "a", 12, 0),
        job("too-many", 0, H, "a", 24, 0),
        job("no-gpus", 0, H, "a", 0, 0),
        job("nested-ok", 0, H, "org/team", 1, 0),
    ];
    for policy in Baseline::ALL {
        let log = run_checked(policy, &s, jobs.clone(), vec![]);
        let submitted: Vec<&str> = log
            .iter()
            .filter_map(|e| match e.body.as_ref().unwrap() {
                Body::JobSubmitted(j) => Some(j.job_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(submitted, [job_id(5, EPOCH_MS).as_str()], "{policy:?}");
    }
}

#[test]
fn nothing_is_written_after_the_end() {
    let mut s = setup(1, 8, &[("a", 1)]);
    s.end_ms = EPOCH_MS + 2 * H;
    for policy in Baseline::ALL {
        let jobs = vec![
            job("done", 0, H, "a", 8, 0),
            job("running", 30 * M, 2 * H, "a", 8, 0),
            job("queued", 90 * M, H, "a", 8, 0),
            job("too-late", 3 * H, H, "a", 8, 0),
        ];
        let log = run_checked(policy, &s, jobs, vec![]);
        let at = starts(&log);
        assert_eq!(
            at.keys().collect::<Vec<_>>(),
            ["done", "running"],
            "{policy:?}"
        );
        let finished = log
            .iter()
            .filter(|e| matches!(e.body, Some(Body::JobFinished(_))))
            .count();
        assert_eq!(finished, 1, "{policy:?}");
        let submitted = log
            .iter()
            .filter(|e| matches!(e.body, Some(Body::JobSubmitted(_))))
            .count();
        assert_eq!(submitted, 3, "{policy:?}");
    }
}

/// A deterministic pseudo-random workload: `jobs` jobs over `days`, on 8-GPU nodes, for
/// allocations `a/x`, `a/y`, `b` and the inner account `a` (rejected).
fn mixed_workload(jobs: usize, days: i64, seed: u64) -> Vec<SimJob> {
    let mut state = seed;
    let mut next = move |bound: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    let sizes = [1, 1, 1, 2, 4, 8, 8, 16, 32];
    let allocations = ["a/x", "a/x", "a/y", "b", "b", "b", "a"];
    let mut out: Vec<SimJob> = (0..jobs)
        .map(|i| {
            let at = next((days * DAY) as u64) as i64;
            let duration = (next(12 * H as u64) as i64) + M;
            let size = sizes[next(sizes.len() as u64) as usize];
            let allocation = allocations[next(allocations.len() as u64) as usize];
            let priority = next(3) as i32;
            job(&format!("j{i}"), at, duration, allocation, size, priority)
        })
        .collect();
    out.sort_by_key(|j| j.submit_ms);
    out
}

fn nested_setup(nodes: usize, days: i64) -> Setup {
    let accounts = vec![
        pb::Account {
            name: "a".into(),
            share: 2,
            children: leaves(&[("x", 3), ("y", 1)]),
        },
        pb::Account {
            name: "b".into(),
            share: 1,
            children: vec![],
        },
    ];
    let set = pb::BudgetTreeSet {
        cluster: "c1".into(),
        accounts,
    };
    Setup::new(
        set,
        Setup::uniform_nodes("n", nodes, 8),
        EPOCH_MS + days * DAY,
    )
    .unwrap()
}

#[test]
fn logs_keep_the_contract_under_a_crowded_mixed_workload() {
    let s = nested_setup(6, 5);
    let jobs = mixed_workload(600, 4, 7);
    let actions = vec![
        node_action(
            3 * H,
            Action::Cordon {
                node: "n002".into(),
            },
        ),
        node_action(
            5 * H,
            Action::Maintenance {
                nodes: vec!["n003".into()],
                start_ms: EPOCH_MS + DAY,
                end_ms: EPOCH_MS + DAY + H,
            },
        ),
        node_action(
            20 * H,
            Action::Uncordon {
                node: "n002".into(),
            },
        ),
        budget_action(DAY, &[("b", 1), ("c", 1)]),
        // Invalid (duplicate accounts): logged, the tree in force stays.
        budget_action(2 * DAY, &[("b", 1), ("b", 1)]),
    ];
    for policy in Baseline::ALL {
        let log = run_checked(policy, &s, jobs.clone(), actions.clone());
        let again = run(policy, &s, &Workload::new(jobs.clone(), actions.clone()));
        assert_eq!(log, again, "{policy:?} is deterministic");
        let at = starts(&log);
        assert!(at.len() > 50, "{policy:?} started only {}", at.len());
        // After the new tree at day 1, a/x and a/y are no allocations: their later jobs are
        // rejected; the inner account "a" never is one.
        for (i, j) in jobs.iter().enumerate() {
            let accepted = log.iter().any(|e| match e.body.as_ref().unwrap() {
                Body::JobSubmitted(s) => s.job_id == job_id(i, j.submit_ms),
                _ => false,
            });
            let leaf_then = match j.allocation.as_str() {
                "a/x" | "a/y" => j.submit_ms < EPOCH_MS + DAY,
                "b" => true,
                _ => false,
            };
            assert_eq!(accepted, leaf_then, "{policy:?} {}", j.name);
        }
    }
}
