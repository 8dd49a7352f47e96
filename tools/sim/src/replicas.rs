//! Replicas: the same workload with every arrival nudged, to tell a policy's effect from noise.
//!
//! Place in the flow: after the main run. With `--replicas N`, the command line replays
//! `N - 1` more copies of the workload ([`jittered`]) under every policy and [`spread`] turns
//! the N runs of each policy into min / median / max of the headline figures, and of each
//! allocation's figures under the first policy, which the report prints beside the main run.
//!
//! Why: a cluster under 2-3x oversubscription is chaotic. One job arriving a second later
//! changes which job a reservation goes to, which changes the next hour's ranking, and so on.
//! In three Helios runs (256 and 288 GPUs), a 1 s change of the launcher's stop delay moved
//! fairshare's owed delivery by up to 3 points, its worst allocation by up to 14 points and
//! occupancy by up to 1.3 points. A user choosing a window or a budget from a single run
//! would be reading that noise; the spread over replicas says how large a difference must be
//! to mean something.
//!
//! A replica shifts each job's submission by up to `jitter` either way, by a stable hash of
//! the job's name and the replica number, so a replica is the same on every machine and run.
//! Replica 0 is the workload itself.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use fairshare_events::headers::content_hash;

use crate::engine::EngineConfig;
use crate::metrics::{AllocationMetrics, RunMetrics};
use crate::setup::{EPOCH_MS, Setup};
use crate::simulate::{Policy, simulate};
use crate::workload::{SimJob, Workload};

/// Runs replicas `1..replicas` of `workload` ([`jittered`]) under every policy, on up to
/// `threads` threads (at least one), and returns each replica's metrics in replica order, so
/// the spread is the same however many threads ran them. `done(replica, wall time)` is called
/// as each finishes, in the order they finish.
#[allow(clippy::too_many_arguments)]
pub fn run_replicas(
    setup: &Setup,
    workload: &Workload,
    config: &EngineConfig,
    policies: &[Policy],
    replicas: u32,
    jitter_ms: i64,
    threads: usize,
    done: impl Fn(u32, Duration) + Sync,
) -> Vec<Vec<RunMetrics>> {
    let count = replicas.saturating_sub(1) as usize;
    let next = AtomicU32::new(1);
    let results: Mutex<Vec<Option<Vec<RunMetrics>>>> = Mutex::new(vec![None; count]);
    let worker = || {
        loop {
            let replica = next.fetch_add(1, Ordering::Relaxed);
            if replica >= replicas {
                break;
            }
            let started = Instant::now();
            let nudged = jittered(workload, replica, jitter_ms);
            let metrics: Vec<RunMetrics> = simulate(setup, &nudged, config, policies, |_, _| {})
                .into_iter()
                .map(|r| r.metrics)
                .collect();
            done(replica, started.elapsed());
            // Nothing panics while the lock is held, so it is never poisoned. (A replica that
            // panics does so in `simulate`, before it; the scope below passes that panic on
            // once the other threads finish.)
            if let Ok(mut slots) = results.lock()
                && let Some(slot) = slots.get_mut(replica as usize - 1)
            {
                *slot = Some(metrics);
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads.clamp(1, count.max(1)) {
            scope.spawn(worker);
        }
        worker();
    });
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|slot| slot.expect("every replica ran: a thread that did not would have panicked"))
        .collect()
}

/// `workload` with each job's submission shifted by up to `jitter_ms` either way (never before
/// the epoch), by a hash of the job's name and `replica`. Replica 0, or a jitter of 0, is the
/// workload unchanged.
pub fn jittered(workload: &Workload, replica: u32, jitter_ms: i64) -> Workload {
    if replica == 0 || jitter_ms <= 0 {
        return workload.clone();
    }
    let width = u64::try_from(jitter_ms).unwrap_or(0).saturating_mul(2) + 1;
    let jobs: Vec<SimJob> = workload
        .jobs
        .iter()
        .map(|job| {
            let mut key = job.name.as_bytes().to_vec();
            key.extend_from_slice(&replica.to_be_bytes());
            let shift = i64::try_from(content_hash(&key) % width).unwrap_or(0) - jitter_ms;
            SimJob {
                submit_ms: job.submit_ms.saturating_add(shift).max(EPOCH_MS),
                ..job.clone()
            }
        })
        .collect();
    Workload::new(jobs, workload.actions.clone())
}

/// A figure as an exact fraction `(numerator, denominator)`, so ordering and printing need no
/// floats.
pub type Share = (u128, u128);

/// The lowest, median (the lower one for an even count) and highest of a figure over the
/// replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Lowest.
    pub min: Share,
    /// Median.
    pub median: Share,
    /// Highest.
    pub max: Share,
}

impl Range {
    /// The range of `shares` (at least one), compared exactly by cross-multiplication.
    fn of(mut shares: Vec<Share>) -> Option<Range> {
        // A zero denominator counts as 0 (as 0 / 1): cross-multiplying it as it stands would
        // make it equal to every share, which is no order at all.
        let value = |s: &Share| if s.1 == 0 { (0, 1) } else { (s.0, s.1) };
        shares.sort_by(|a, b| {
            let (a, b) = (value(a), value(b));
            a.0.saturating_mul(b.1).cmp(&b.0.saturating_mul(a.1))
        });
        Some(Range {
            min: *shares.first()?,
            median: shares[(shares.len() - 1) / 2],
            max: *shares.last()?,
        })
    }
}

/// One policy's headline figures over all replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpread {
    /// Policy name.
    pub policy: String,
    /// Owed GPU time delivered, overall.
    pub owed: Range,
    /// The worst allocation's delivered share of owed (among those owed a GPU-day).
    pub worst: Range,
    /// Occupancy under contention.
    pub occupancy: Range,
    /// Lost work over delivered GPU time.
    pub lost: Range,
}

/// The spread table of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spread {
    /// Runs per policy, the main run included.
    pub replicas: u32,
    /// The largest shift of a submission, in ms.
    pub jitter_ms: i64,
    /// One row per policy, in the order of the main run.
    pub rows: Vec<PolicySpread>,
    /// Per allocation of the main run's first policy (fairshare when it runs), in path order:
    /// its delivered share of owed over the replicas, and its delivered GPU time (as a share
    /// of the GPU-ms of one hour, so the range orders exactly). What a budget change is judged
    /// by: its own allocation's figures, against their noise.
    pub allocations: Vec<AllocationSpread>,
}

/// One allocation's figures over the replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationSpread {
    /// Its path.
    pub path: String,
    /// Delivered share of owed.
    pub owed: Range,
    /// Delivered GPU-ms, over one hour's ms: GPU-hours.
    pub delivered_gpu_h: Range,
}

/// The spread of each policy of `runs` (one entry per replica, each with the same policies in
/// the same order; the main run first). `min_owed_gpu_ms` is the floor for the worst
/// allocation, as in the main table.
pub fn spread(runs: &[Vec<RunMetrics>], jitter_ms: i64, min_owed_gpu_ms: u128) -> Option<Spread> {
    let main = runs.first()?;
    let rows = main
        .iter()
        .enumerate()
        .filter_map(|(i, first)| {
            let same: Vec<&RunMetrics> = runs.iter().filter_map(|r| r.get(i)).collect();
            let pick =
                |f: &dyn Fn(&RunMetrics) -> Share| Range::of(same.iter().map(|m| f(m)).collect());
            Some(PolicySpread {
                policy: first.policy.clone(),
                owed: pick(&|m| (m.delivered_owed_gpu_ms, m.owed_gpu_ms))?,
                // Over the replicas that have an allocation owed the floor: one without (a
                // short run) has no worst allocation, not one at 0% (nothing at all: "-").
                worst: Range::of(
                    same.iter()
                        .filter_map(|m| m.worst_allocation(min_owed_gpu_ms))
                        .map(|(a, _)| (a.delivered_owed_gpu_ms, a.owed_gpu_ms))
                        .collect(),
                )
                .unwrap_or(Range {
                    min: (0, 0),
                    median: (0, 0),
                    max: (0, 0),
                }),
                occupancy: pick(&|m| (m.contention_used_gpu_ms, m.contention_available_gpu_ms))?,
                lost: pick(&|m| (m.lost_gpu_ms, m.used_gpu_ms))?,
            })
        })
        .collect();
    let allocations = main
        .first()
        .map(|first| {
            first
                .allocations
                .iter()
                .filter_map(|a| {
                    let found: Vec<&AllocationMetrics> = runs
                        .iter()
                        .filter_map(|run| {
                            run.first()?.allocations.iter().find(|b| b.path == a.path)
                        })
                        .collect();
                    Some(AllocationSpread {
                        path: a.path.clone(),
                        owed: Range::of(
                            found
                                .iter()
                                .map(|b| (b.delivered_owed_gpu_ms, b.owed_gpu_ms))
                                .collect(),
                        )?,
                        delivered_gpu_h: Range::of(
                            found
                                .iter()
                                .map(|b| (b.delivered_gpu_ms, 3_600_000))
                                .collect(),
                        )?,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Spread {
        replicas: u32::try_from(runs.len()).unwrap_or(u32::MAX),
        jitter_ms,
        rows,
        allocations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::sample;

    fn job(name: &str, submit_ms: i64) -> SimJob {
        SimJob {
            name: name.to_owned(),
            submit_ms,
            duration_ms: 60_000,
            allocation: "lab/a".to_owned(),
            user: "u".to_owned(),
            gpus: 1,
            min_runtime_ms: 60_000,
            resumable: true,
            priority: 0,
        }
    }

    #[test]
    fn a_replica_nudges_every_arrival_within_the_jitter_the_same_way_every_time() {
        let jobs: Vec<SimJob> = (0..200)
            .map(|i| job(&format!("j{i}"), EPOCH_MS + 3_600_000 + i * 1_000))
            .collect();
        let w = Workload::new(jobs, Vec::new());
        assert_eq!(jittered(&w, 0, 60_000), w, "replica 0 is the workload");
        assert_eq!(jittered(&w, 3, 0), w, "no jitter, no change");
        let a = jittered(&w, 1, 60_000);
        assert_eq!(a, jittered(&w, 1, 60_000), "deterministic");
        assert_ne!(a, jittered(&w, 2, 60_000), "replicas differ");
        let mut moved = 0;
        for original in &w.jobs {
            let nudged = a.jobs.iter().find(|j| j.name == original.name).unwrap();
            let shift = nudged.submit_ms - original.submit_ms;
            assert!(shift.abs() <= 60_000, "{shift}");
            moved += usize::from(shift != 0);
            assert_eq!(nudged.duration_ms, original.duration_ms);
        }
        assert!(moved > 190, "{moved} of 200 moved");
        assert!(a.jobs.windows(2).all(|p| p[0].submit_ms <= p[1].submit_ms));
        // Never before the epoch.
        let early = Workload::new(vec![job("first", EPOCH_MS)], Vec::new());
        assert!((1..20).all(|r| jittered(&early, r, 60_000).jobs[0].submit_ms >= EPOCH_MS));
    }

    #[test]
    fn the_spread_takes_min_lower_median_and_max_exactly() {
        let base = sample::report().runs;
        let mut runs = Vec::new();
        for (delivered, used) in [(990, 980), (950, 990), (970, 900), (999, 950)] {
            let mut r = base.clone();
            r[0].delivered_owed_gpu_ms = delivered;
            r[0].owed_gpu_ms = 1000;
            r[0].contention_used_gpu_ms = used;
            r[0].contention_available_gpu_ms = 1000;
            let a = &mut r[0].allocations[0];
            (a.owed_gpu_ms, a.delivered_owed_gpu_ms) = (1000, delivered);
            a.delivered_gpu_ms = delivered * 3_600_000;
            runs.push(r);
        }
        let s = spread(&runs, 60_000, 0).unwrap();
        assert_eq!(s.replicas, 4);
        assert_eq!(s.rows.len(), 2);
        let fs = &s.rows[0];
        assert_eq!(fs.policy, "fairshare");
        assert_eq!(fs.owed.min, (950, 1000));
        assert_eq!(fs.owed.median, (970, 1000), "the lower of 970 and 990");
        assert_eq!(fs.owed.max, (999, 1000));
        assert_eq!(fs.occupancy.min, (900, 1000));
        assert_eq!(fs.occupancy.max, (990, 1000));
        // The baseline did not change between replicas: a single point.
        let fifo = &s.rows[1];
        assert_eq!(fifo.owed.min, fifo.owed.max);
        // Per allocation of the first policy, in the main run's order, each over every run.
        let paths: Vec<&str> = s.allocations.iter().map(|a| a.path.as_str()).collect();
        let expected: Vec<&str> = base[0]
            .allocations
            .iter()
            .map(|a| a.path.as_str())
            .collect();
        assert_eq!(paths, expected);
        let a = &s.allocations[0];
        assert_eq!(
            (a.owed.min, a.owed.median, a.owed.max),
            ((950, 1000), (970, 1000), (999, 1000))
        );
        assert_eq!(a.delivered_gpu_h.median, (970 * 3_600_000, 3_600_000));
        assert!(spread(&[], 0, 0).is_none());
    }

    /// A replica none of whose allocations was owed the floor has no worst allocation: the
    /// range is over the others, not pulled to "-" by it.
    #[test]
    fn a_replica_without_an_allocation_owed_the_floor_leaves_the_worst_range_alone() {
        let base = sample::report().runs;
        let mut runs = Vec::new();
        for owed in [1000, 10, 2000] {
            let mut r = base.clone();
            for a in &mut r[0].allocations {
                (a.owed_gpu_ms, a.delivered_owed_gpu_ms) = (owed, owed * 9 / 10);
            }
            runs.push(r);
        }
        let s = spread(&runs, 60_000, 500).unwrap();
        let worst = &s.rows[0].worst;
        assert_eq!((worst.min, worst.max), ((900, 1000), (1800, 2000)));
        // None at all: nothing to show.
        let none = spread(&runs[1..2], 60_000, 500).unwrap();
        assert_eq!(none.rows[0].worst.max, (0, 0));
    }

    #[test]
    fn a_share_with_nothing_owed_sorts_as_zero_whatever_the_order_of_replicas() {
        for order in [
            vec![(98, 100), (0, 0), (99, 100)],
            vec![(0, 0), (99, 100), (98, 100)],
            vec![(99, 100), (98, 100), (0, 0)],
        ] {
            let r = Range::of(order.clone()).unwrap();
            assert_eq!(r.min, (0, 0), "{order:?}");
            assert_eq!(r.median, (98, 100), "{order:?}");
            assert_eq!(r.max, (99, 100), "{order:?}");
        }
    }
}
