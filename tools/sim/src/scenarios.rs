//! Constructed scenarios: the situations history has too few of, built by hand so their
//! outcomes can be computed by hand.
//!
//! Place in the flow: a source of workloads beside [`crate::mapping`]. Each scenario is a small
//! cluster, a flat budget tree and a [`Workload`]; `fairshare-sim scenario <name>` runs it with
//! every policy, and the tests check fairshare's outcome against the hand-computed one.

use fairshare_events::pb;

use crate::setup::{EPOCH_MS, Setup, SetupError};
use crate::workload::{Action, SimJob, TimedAction, Workload};

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;

/// A constructed scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name on the command line.
    pub name: &'static str,
    /// What it shows.
    pub description: &'static str,
    /// Cluster and budget.
    pub setup: Setup,
    /// Jobs and actions.
    pub workload: Workload,
}

/// Every scenario name, in the order `fairshare-sim scenario --list` prints them.
pub const NAMES: [&str; 7] = [
    "debug-burst",
    "debug-while-over-served",
    "idle-team-returns",
    "unallocated-fill",
    "cordon-under-load",
    "share-change",
    "fragmented",
];

/// The scenario named `name`.
pub fn by_name(name: &str) -> Option<Result<Scenario, SetupError>> {
    Some(match name {
        "debug-burst" => debug_burst(),
        "debug-while-over-served" => debug_while_over_served(),
        "idle-team-returns" => idle_team_returns(),
        "unallocated-fill" => unallocated_fill(),
        "cordon-under-load" => cordon_under_load(),
        "share-change" => share_change(),
        "fragmented" => fragmented(),
        _ => return None,
    })
}

/// A flat budget tree: one top-level allocation per `(name, share)`.
pub fn flat_budget(cluster: &str, shares: &[(&str, u64)]) -> pb::BudgetTreeSet {
    pb::BudgetTreeSet {
        cluster: cluster.to_owned(),
        accounts: shares
            .iter()
            .map(|(name, share)| pb::Account {
                name: (*name).to_owned(),
                share: *share,
                children: Vec::new(),
            })
            .collect(),
    }
}

/// A job for scenarios: `gpus` GPUs of `allocation` submitted `at_ms` after the epoch.
pub fn job(
    name: String,
    at_ms: i64,
    allocation: &str,
    gpus: u32,
    duration_ms: i64,
    min_runtime_ms: i64,
) -> SimJob {
    SimJob {
        name,
        submit_ms: EPOCH_MS + at_ms,
        duration_ms,
        allocation: allocation.to_owned(),
        user: format!("{allocation}-user"),
        gpus,
        min_runtime_ms,
        resumable: true,
        priority: 0,
    }
}

/// `count` jobs named `<prefix>-<i>`, one every `every_ms` from `from_ms`.
fn stream(
    prefix: &str,
    count: usize,
    from_ms: i64,
    every_ms: i64,
    make: impl Fn(String, i64) -> SimJob,
) -> Vec<SimJob> {
    (0..count)
        .map(|i| make(format!("{prefix}-{i:04}"), from_ms + every_ms * i as i64))
        .collect()
}

fn cluster(shares: &[(&str, u64)], nodes: usize, days: i64) -> Result<Setup, SetupError> {
    Setup::new(
        flat_budget("sim", shares),
        Setup::uniform_nodes("node", nodes, 8),
        EPOCH_MS + days * DAY,
    )
}

/// Two teams keep a 32-GPU cluster full with long 8-GPU jobs (1 h minimum runtime); after
/// 3 hours an idle evaluation team sends 20 one-GPU debug jobs in 5 minutes. The first 16,
/// under the team's debug allowance (16 GPUs), start within one cycle plus the grace period:
/// past-minimum work of the over-served teams makes room. The last 4 are beyond the allowance
/// and wait for their rank, about a minute, so the run's debug p90 is about a minute: the
/// scenario shows where the allowance ends (`tools/sim/tests/scenarios.rs` holds both).
pub fn debug_burst() -> Result<Scenario, SetupError> {
    let mut jobs = Vec::new();
    for team in ["train", "research"] {
        jobs.extend(stream(team, 12, 0, 10 * MIN, |n, at| {
            job(n, at, team, 8, 12 * HOUR, HOUR)
        }));
    }
    jobs.extend(stream("evals-debug", 20, 3 * HOUR, 15_000, |n, at| {
        let mut j = job(n, at, "evals", 1, 5 * MIN, 10 * MIN);
        j.resumable = false;
        j
    }));
    Ok(Scenario {
        name: "debug-burst",
        description: "a burst of debug jobs from an idle team on a full cluster",
        setup: cluster(&[("train", 45), ("research", 45), ("evals", 10)], 4, 1)?,
        workload: Workload::new(jobs, Vec::new()),
    })
}

/// Teams `a` and `b` hold 50% each of 32 GPUs and both send more 8-GPU work (1 h minimum
/// runtime) than the cluster holds, so they settle at 16 GPUs each with no rotation that pays.
/// From 6 h on, `a`'s researchers send a one-GPU debug job every 30 min. Rank and queue order
/// alone leave most of those behind the 8-GPU work for good (44 of 60 never start); the debug
/// allowance puts each on the next node that frees up (no running job is small enough to
/// displace for one GPU without stranding seven, since only whole-node work queues to take
/// them up), and neither team's share suffers.
pub fn debug_while_over_served() -> Result<Scenario, SetupError> {
    let mut jobs = Vec::new();
    for team in ["a", "b"] {
        jobs.extend(stream(team, 150, 0, 20 * MIN, |n, at| {
            job(n, at, team, 8, 3 * HOUR, HOUR)
        }));
    }
    jobs.extend(stream("a-debug", 60, 6 * HOUR, 30 * MIN, |n, at| {
        let mut j = job(n, at, "a", 1, 5 * MIN, 10 * MIN);
        j.resumable = false;
        j
    }));
    Ok(Scenario {
        name: "debug-while-over-served",
        description: "debug jobs of a team that is over its share, on a full cluster",
        setup: cluster(&[("a", 50), ("b", 50)], 4, 2)?,
        workload: Workload::new(jobs, Vec::new()),
    })
}

/// Teams `a` and `b` hold 50% each of 32 GPUs. `a` keeps the cluster busy for 10 days; `b`
/// sends nothing for a week, then comes back with four jobs at once and a steady stream after,
/// more work than its share. `b` has used
/// nothing in the window, so its jobs go first and take GPUs from `a` as `a`'s jobs pass their
/// 2-hour minimum runtime.
pub fn idle_team_returns() -> Result<Scenario, SetupError> {
    let mut jobs = stream("a", 2000, 0, 7 * MIN, |n, at| {
        job(n, at, "a", 8, 6 * HOUR, 2 * HOUR)
    });
    let b = |n, at| job(n, at, "b", 8, 6 * HOUR, 2 * HOUR);
    jobs.extend(stream("b-back", 4, 7 * DAY, 0, b));
    jobs.extend(stream("b", 400, 7 * DAY + 5 * MIN, 5 * MIN, b));
    Ok(Scenario {
        name: "idle-team-returns",
        description: "a team idle for a week comes back",
        setup: cluster(&[("a", 50), ("b", 50)], 4, 10)?,
        workload: Workload::new(jobs, Vec::new()),
    })
}

/// An idle 32-GPU cluster fills with unallocated work; an hour later team `a` submits four
/// 8-GPU jobs. Unallocated work is never protected, so `a`'s jobs start after one grace
/// period, and the unallocated jobs run again once `a`'s finish.
pub fn unallocated_fill() -> Result<Scenario, SetupError> {
    let mut jobs = stream("free", 32, 0, 0, |n, at| job(n, at, "a", 1, 10 * HOUR, 0));
    jobs.extend(stream("a", 4, HOUR, 0, |n, at| {
        job(n, at, "a", 8, 2 * HOUR, HOUR)
    }));
    Ok(Scenario {
        name: "unallocated-fill",
        description: "unallocated work fills idle GPUs and leaves when allocated work arrives",
        setup: cluster(&[("a", 50), ("b", 50)], 4, 1)?,
        workload: Workload::new(jobs, Vec::new()),
    })
}

/// A loaded 64-GPU cluster; node `node003` is cordoned for repair after 2 hours and returned
/// after 8. Its jobs stop as each reaches its minimum runtime; it gets no new work while
/// cordoned; it is reported drained once empty.
pub fn cordon_under_load() -> Result<Scenario, SetupError> {
    let mut jobs = Vec::new();
    for team in ["a", "b"] {
        jobs.extend(stream(team, 120, 0, 5 * MIN, |n, at| {
            job(n, at, team, 4, 3 * HOUR, 90 * MIN)
        }));
    }
    let actions = vec![
        TimedAction {
            at_ms: EPOCH_MS + 2 * HOUR,
            action: Action::Cordon {
                node: "node003".into(),
            },
        },
        TimedAction {
            at_ms: EPOCH_MS + 8 * HOUR,
            action: Action::Uncordon {
                node: "node003".into(),
            },
        },
    ];
    Ok(Scenario {
        name: "cordon-under-load",
        description: "a node cordoned for repair under load",
        setup: cluster(&[("a", 50), ("b", 50)], 8, 1)?,
        workload: Workload::new(jobs, actions),
    })
}

/// Teams `a` and `b` both ask for more than the 32-GPU cluster for 6 days at 50/50; after 3
/// days the manager changes the shares to 80/20. Both teams are at usage ratio 1 when the
/// change lands, and allocated time from then on accrues at the new fractions, so delivery
/// moves to 80/20 at once (not to "all for a until the window forgets").
pub fn share_change() -> Result<Scenario, SetupError> {
    let mut jobs = Vec::new();
    for team in ["a", "b"] {
        jobs.extend(stream(team, 1200, 0, 8 * MIN, |n, at| {
            job(n, at, team, 4, 3 * HOUR, HOUR)
        }));
    }
    let actions = vec![TimedAction {
        at_ms: EPOCH_MS + 3 * DAY,
        action: Action::SetBudget(flat_budget("sim", &[("a", 80), ("b", 20)])),
    }];
    Ok(Scenario {
        name: "share-change",
        description: "a manager changes shares mid-run",
        setup: cluster(&[("a", 50), ("b", 50)], 4, 6)?,
        workload: Workload::new(jobs, actions),
    })
}

/// A 32-GPU cluster, all of it team `a`'s work: after half an hour, best-fit placement has
/// left `node000` and `node001` each with a 6-GPU job protected for 8 hours and 2 GPUs free,
/// and `node002` and `node003` each with a 2-GPU job past its 20-minute minimum runtime
/// (longer than a debug job's, so the small jobs are placed in submission order) and 6 GPUs
/// free. Then `a` sends two 8-GPU jobs. No rule lets a job take its own allocation's work,
/// and 16 GPUs sit idle; packing moves put each small job in a 2-GPU hole and each big
/// job on the node it left. With `--packing false` they wait for the small jobs to end (10 h).
pub fn fragmented() -> Result<Scenario, SetupError> {
    let long = |name: &str, gpus, min_runtime_ms| {
        job(name.to_owned(), 0, "a", gpus, 10 * HOUR, min_runtime_ms)
    };
    let filler = |name: &str, gpus| job(name.to_owned(), 0, "a", gpus, 30 * MIN, 20 * MIN);
    // Submission order decides best-fit placement: each filler tops up the node before it.
    let jobs = vec![
        long("protected-0", 6, 8 * HOUR),
        long("protected-1", 6, 8 * HOUR),
        filler("filler-0", 2),
        filler("filler-1", 2),
        long("small-2", 2, 20 * MIN),
        filler("filler-2", 6),
        long("small-3", 2, 20 * MIN),
        filler("filler-3", 6),
        job("big-0".to_owned(), 35 * MIN, "a", 8, 2 * HOUR, HOUR),
        job("big-1".to_owned(), 35 * MIN, "a", 8, 2 * HOUR, HOUR),
    ];
    Ok(Scenario {
        name: "fragmented",
        description: "free GPUs scattered beside small jobs while whole-node jobs wait (packing moves)",
        setup: cluster(&[("a", 50), ("b", 50)], 4, 1)?,
        workload: Workload::new(jobs, Vec::new()),
    })
}
