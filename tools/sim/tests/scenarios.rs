//! Constructed scenarios with outcomes computed by hand, run through the services' domain
//! code by the simulator's engine.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::support::{SeenLog, read};
use fairshare_events::pb::PreemptionCause;
use fairshare_sim::engine::{self, EngineConfig};
use fairshare_sim::metrics::{CausePreemptions, measure};
use fairshare_sim::scenarios::{self, Scenario};
use fairshare_sim::setup::EPOCH_MS;
use fairshare_sim::simulate::measure_config;

const S: i64 = 1000;
const MIN: i64 = 60 * S;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;

fn scenario(name: &str) -> Scenario {
    scenarios::by_name(name).unwrap().unwrap()
}

/// Runs the scenario with the default engine (grace 30 s, launcher stops in 10 s, share
/// floor on).
fn run(s: &Scenario) -> (SeenLog, fairshare_sim::metrics::RunMetrics) {
    run_floor(s, true)
}

/// Runs the scenario with the default engine, the share floor on or off.
fn run_floor(s: &Scenario, share_floor: bool) -> (SeenLog, fairshare_sim::metrics::RunMetrics) {
    let config = EngineConfig {
        share_floor,
        ..EngineConfig::default()
    };
    let out = engine::run(&s.setup, &s.workload, &config, |_| {});
    let metrics = measure("fairshare", &out.log, &measure_config(&s.setup, &config));
    (read(&out.log), metrics)
}

#[test]
fn unallocated_work_fills_idle_gpus_and_leaves_when_allocated_work_arrives() {
    let s = scenario("unallocated-fill");
    let (seen, m) = run(&s);
    let free = seen.named("free-");
    assert_eq!(free.len(), 32);
    // An idle cluster: every unallocated job starts the moment it is submitted.
    for j in &free {
        assert_eq!(j.wait(), Some(0), "{}", j.name);
    }
    // At 1 h four 8-GPU allocated jobs arrive on a full cluster. Unallocated work is never
    // protected: it is ordered off at once and the launcher stops it in 10 s, so each
    // allocated job starts 10 s after submission (well inside one cycle plus the 30 s grace).
    let team = seen.named("a-");
    assert_eq!(team.len(), 4);
    for j in &team {
        assert_eq!(j.wait(), Some(10 * S), "{}", j.name);
        assert!(
            j.ordered.is_empty(),
            "allocated work inside its minimum runtime stays"
        );
    }
    // Exactly the 32 unallocated jobs were ordered off, once each, at 1 h.
    for j in &free {
        assert_eq!(j.ordered, vec![EPOCH_MS + HOUR], "{}", j.name);
    }
    // They come back when the allocated jobs finish (1 h + 10 s + 2 h) and fill everything.
    let back = EPOCH_MS + 3 * HOUR + 10 * S;
    assert_eq!(seen.running_gpus("a", back), 32);
    for j in &free {
        assert_eq!(j.runs.len(), 2, "{}", j.name);
        assert_eq!(j.runs[1].0, back, "{}", j.name);
    }
    assert_eq!(m.violations, 0);
    assert_eq!(m.preemptions, 32);
    // Each unallocated job had run 1 h (two 30-min checkpoints) when stopped 10 s later:
    // 10 s of one GPU lost per job.
    assert_eq!(m.lost_gpu_ms, 32 * 10 * S as u128);
    // All of it filed under the one cause that applied.
    assert_eq!(
        m.by_cause,
        [CausePreemptions {
            cause: PreemptionCause::Unallocated,
            orders: 32,
            stopped: 32,
            lost_gpu_ms: 32 * 10 * S as u128,
        }]
    );
}

#[test]
fn a_debug_burst_waits_no_more_than_one_cycle_plus_grace() {
    // By the window alone (the share floor is below).
    let s = scenario("debug-burst");
    let (seen, m) = run_floor(&s, false);
    let debug = seen.named("evals-debug-");
    assert_eq!(debug.len(), 20);
    let grace = 30 * S;
    for j in &debug {
        let wait = j.wait().expect("every debug job starts");
        assert!(wait <= grace, "{} waited {wait} ms", j.name);
    }
    // The first one needs a victim: ordered at its submission, stopped 10 s later.
    assert_eq!(debug[0].wait(), Some(10 * S));
    // One 8-GPU victim makes room for the next seven as they arrive.
    assert!(debug[1..8].iter().all(|j| j.wait() == Some(0)));
    // 20 one-GPU jobs need three nodes' worth of victims, no more.
    let victims = seen.jobs.values().filter(|j| !j.ordered.is_empty()).count();
    assert_eq!(victims, 3, "victims ordered off");
    assert_eq!(m.violations, 0);
}

#[test]
fn with_the_share_floor_a_debug_burst_under_the_allowance_waits_no_more_than_grace() {
    let s = scenario("debug-burst");
    let (seen, m) = run(&s);
    let debug = seen.named("evals-debug-");
    assert_eq!(debug.len(), 20);
    let waits: Vec<i64> = debug.iter().map(|j| j.wait().unwrap()).collect();
    // The allowance (16 GPUs) covers the first 16: each starts within the grace period, the
    // first and the ninth after one whole-node victim each (the debug pass tries the rank
    // rule too, ahead of train's job, which is below its floor once the first victim left).
    assert!(waits[..16].iter().all(|&w| w <= 30 * S), "{waits:?}");
    assert_eq!((waits[0], waits[8]), (10 * S, 10 * S));
    // The four beyond it wait for their rank: evals then holds 16 GPUs on a 3.2-GPU floor,
    // and train is below its own. They start when GPUs free up, about a minute later.
    assert!(
        waits[16..].iter().all(|&w| w > 30 * S && w <= 2 * MIN),
        "{waits:?}"
    );
    // Two whole-node victims; the teams that gave them up get 99% of their owed time, and
    // evals misses only the four late jobs' wait (4 x 1 GPU x at most 2 min).
    let victims = seen.jobs.values().filter(|j| !j.ordered.is_empty()).count();
    assert_eq!(victims, 2);
    for a in &m.allocations {
        let missed = a.owed_gpu_ms - a.delivered_owed_gpu_ms;
        if a.path == "evals" {
            assert!(
                missed <= 4 * 2 * MIN as u128,
                "evals missed {missed} GPU-ms"
            );
        } else {
            assert!(
                missed * 100 <= a.owed_gpu_ms,
                "{} missed {missed} GPU-ms",
                a.path
            );
        }
    }
    assert_eq!(m.violations, 0);
}

#[test]
fn a_team_idle_for_a_week_comes_back_first() {
    // By the window alone (with the share floor: the next test).
    let s = scenario("idle-team-returns");
    let (seen, m) = run_floor(&s, false);
    let back = EPOCH_MS + 7 * DAY;
    // While b is idle, a's work uses the whole cluster: no GPU is kept for b.
    for h in [1, 50, 100, 160] {
        assert_eq!(seen.running_gpus("a", EPOCH_MS + h * HOUR), 32, "hour {h}");
    }
    // b has used nothing in the window, so its jobs go first: each of its first four jobs
    // starts within the grace period (a's running jobs are past their 2 h minimum runtime).
    let b = seen.named("b-");
    for j in &b[..4] {
        let wait = j.wait().expect("b's early jobs start");
        assert!(wait <= 30 * S, "{} waited {wait} ms", j.name);
    }
    // From then on b holds the cluster to the end: a ran 7 days at twice its share, b stays
    // below a's usage ratio for the 3 days left.
    for t in [back + HOUR, back + DAY, back + 2 * DAY + 23 * HOUR] {
        assert_eq!(
            seen.running_gpus("b", t),
            32,
            "at {} h",
            (t - EPOCH_MS) / HOUR
        );
    }
    // a's jobs were only ever ordered off past their minimum runtime.
    assert_eq!(m.violations, 0);
    assert!(seen.jobs.values().all(|j| j.ordered.iter().all(|&o| {
        let start = j.runs.iter().rev().find(|r| r.0 <= o).unwrap().0;
        o >= start + j.min_runtime_ms
    })));
}

#[test]
fn with_the_share_floor_the_returning_team_gets_its_share_and_nobody_pays_back() {
    let s = scenario("idle-team-returns");
    let (seen, m) = run(&s);
    let back = EPOCH_MS + 7 * DAY;
    for h in [1, 50, 100, 160] {
        assert_eq!(seen.running_gpus("a", EPOCH_MS + h * HOUR), 32, "hour {h}");
    }
    // b holds nothing, 16 GPUs below its floor: its first two jobs take two of a's (past
    // their 2 h minimum runtime) within the grace period. Then a holds its floor, 16, and
    // keeps it: b's next two wait for a's jobs to end (they run 6 h).
    let b = seen.named("b-");
    let waits: Vec<i64> = b[..4].iter().map(|j| j.wait().unwrap()).collect();
    assert!(waits[..2].iter().all(|&w| w <= 30 * S), "{waits:?}");
    assert!(
        waits[2..]
            .iter()
            .all(|&w| w > HOUR && w <= 6 * HOUR + 30 * S),
        "{waits:?}"
    );
    // From then on each team holds its share, both having work queued.
    for t in [back + HOUR, back + DAY, back + 2 * DAY + 23 * HOUR] {
        let at = (t - EPOCH_MS) / HOUR;
        assert_eq!(seen.running_gpus("a", t), 16, "a at {at} h");
        assert_eq!(seen.running_gpus("b", t), 16, "b at {at} h");
    }
    // So a, which ran a week at twice its share, pays nothing back in owed time: the window
    // only orders what is beyond the floors. b misses at most its first hour's shortfall.
    let gpu_hour = 3_600_000u128;
    for row in &m.allocations {
        let missed = row.owed_gpu_ms - row.delivered_owed_gpu_ms;
        assert!(missed <= gpu_hour, "{} missed {missed} GPU-ms", row.path);
    }
    assert_eq!(m.violations, 0);
}

#[test]
fn owed_time_the_busy_team_misses_after_the_idle_one_returns_is_window_payback() {
    // By the window alone: the payback the share floor removes (the test above).
    let s = scenario("idle-team-returns");
    let (_, m) = run_floor(&s, false);
    let row = |path: &str| {
        m.allocations
            .iter()
            .find(|a| a.path == path)
            .unwrap_or_else(|| panic!("no row {path} in {:?}", m.allocations))
    };
    let (a, b) = (row("a"), row("b"));
    // From day 7 b holds all 32 GPUs, and a, with work queued, is owed its 16 every hour of
    // the 3 days left: about 16 x 72 GPU-h missed. a ran the first week at twice its share,
    // so every one of those hours began with its window ratio above 1.
    let gpu_hour = 3_600_000u128;
    let a_missed = a.owed_gpu_ms - a.delivered_owed_gpu_ms;
    assert!(a_missed >= 16 * 70 * gpu_hour, "a missed {a_missed}");
    assert!(a_missed <= 16 * 73 * gpu_hour, "a missed {a_missed}");
    assert_eq!(a.missed_over_served_gpu_ms, a_missed);
    // a was over its allocation from its first hour (32 GPUs on a 16-GPU share) to the end:
    // nearly all its owed time fell in such hours.
    assert!(a.owed_over_served_gpu_ms >= 16 * 235 * gpu_hour);
    assert!(a.owed_over_served_gpu_ms <= a.owed_gpu_ms);
    // b, back from a week of nothing, is never over-served.
    assert_eq!(b.owed_over_served_gpu_ms, 0);
    assert_eq!(b.missed_over_served_gpu_ms, 0);
    assert_eq!(m.missed_over_served_gpu_ms, a_missed);
    assert!(m.missed_over_served_gpu_ms <= m.missed_gpu_ms());
}

#[test]
fn a_cordoned_node_drains_as_minimum_runtimes_end() {
    let s = scenario("cordon-under-load");
    let (seen, m) = run(&s);
    let cordon = EPOCH_MS + 2 * HOUR;
    let uncordon = EPOCH_MS + 8 * HOUR;
    // The runs on the node when it was cordoned: (job, start, end).
    let on_node: Vec<_> = seen
        .jobs
        .values()
        .flat_map(|j| {
            j.runs
                .iter()
                .zip(&j.nodes)
                .filter_map(move |(&(start, end), nodes)| {
                    let here =
                        nodes == &["node003"] && start <= cordon && end.is_none_or(|e| e > cordon);
                    here.then_some((j, start, end))
                })
        })
        .collect();
    assert!(!on_node.is_empty(), "the node was busy when cordoned");
    for &(j, start, end) in &on_node {
        // Ordered off when its protection ends, or at once if it had already ended; the
        // launcher stops it 10 s later.
        let due = (start + j.min_runtime_ms).max(cordon);
        assert!(
            j.ordered.contains(&due),
            "{} ordered at {:?}, due {due}",
            j.name,
            j.ordered
        );
        assert_eq!(end, Some(due + 10 * S), "{}", j.name);
    }
    // No placement on the node while cordoned.
    for j in seen.jobs.values() {
        for (run, nodes) in j.runs.iter().zip(&j.nodes) {
            if nodes.iter().any(|n| n == "node003") {
                assert!(
                    run.0 < cordon || run.0 >= uncordon,
                    "{} placed at {}",
                    j.name,
                    run.0
                );
            }
        }
    }
    // Reported drained once, when its last job stopped.
    let drained: Vec<_> = seen
        .nodes
        .iter()
        .filter(|(k, ..)| *k == "drained")
        .collect();
    assert_eq!(drained.len(), 1);
    let last_stop = on_node.iter().filter_map(|r| r.2).max().unwrap();
    assert_eq!(drained[0].2, last_stop);
    // Back in service after the uncordon.
    assert!(seen.jobs.values().any(|j| {
        j.runs
            .iter()
            .zip(&j.nodes)
            .any(|(r, n)| r.0 >= uncordon && n.iter().any(|x| x == "node003"))
    }));
    assert_eq!(m.violations, 0);
    // Each job on the node was stopped for maintenance, whatever else the load ordered.
    let maintenance = m
        .by_cause
        .iter()
        .find(|c| c.cause == PreemptionCause::Maintenance)
        .expect("maintenance orders");
    assert_eq!(maintenance.stopped, on_node.len() as u64);
}

/// Average GPUs `allocation` ran, sampled every 20 minutes over `[from, to)`.
fn average_gpus(seen: &SeenLog, allocation: &str, from: i64, to: i64) -> f64 {
    let samples: Vec<u64> = (from..to)
        .step_by(20 * MIN as usize)
        .map(|t| seen.running_gpus(allocation, t))
        .collect();
    samples.iter().sum::<u64>() as f64 / samples.len() as f64
}

#[test]
fn a_share_change_moves_delivery_to_the_new_shares() {
    let s = scenario("share-change");
    let (seen, m) = run(&s);
    let change = EPOCH_MS + 3 * DAY;
    // Before the change both teams ask for more than the cluster and share it evenly.
    let before = average_gpus(&seen, "a", EPOCH_MS + 6 * HOUR, change);
    assert!(
        (15.0..=17.0).contains(&before),
        "a averaged {before} GPUs before"
    );
    // Allocated time integrates the fraction over the window, so at the change both teams
    // are at usage ratio 1 and stay there by taking new time at the new rates: a 80% of
    // 32 GPUs (25.6), b 20% (6.4). a does not take everything: b's allocated time keeps
    // growing too.
    let after = average_gpus(&seen, "a", change + 3 * HOUR, s.setup.end_ms);
    let b_after = average_gpus(&seen, "b", change + 3 * HOUR, s.setup.end_ms);
    assert!(
        (24.0..=27.2).contains(&after),
        "a averaged {after} GPUs after"
    );
    assert!(
        (4.8..=8.0).contains(&b_after),
        "b averaged {b_after} GPUs after"
    );
    assert_eq!(m.violations, 0);
}

#[test]
fn debug_jobs_of_an_over_served_team_all_start_without_costing_owed_delivery() {
    let s = scenario("debug-while-over-served");
    // The allowance against none, by the window alone; with the share floor, below.
    let run_with = |allowance: u32| {
        let config = EngineConfig {
            debug_allowance_gpus: allowance,
            share_floor: false,
            ..EngineConfig::default()
        };
        let out = engine::run(&s.setup, &s.workload, &config, |_| {});
        let metrics = measure("fairshare", &out.log, &measure_config(&s.setup, &config));
        (read(&out.log), metrics)
    };
    // A job never started counts as waiting for ever.
    let waits = |seen: &SeenLog| -> Vec<i64> {
        let mut w: Vec<i64> = seen
            .named("a-debug-")
            .iter()
            .map(|j| j.wait().unwrap_or(i64::MAX))
            .collect();
        w.sort_unstable();
        w
    };
    let (with_seen, with) = run_with(EngineConfig::default().debug_allowance_gpus);
    let (without_seen, without) = run_with(0);
    let (with_waits, without_waits) = (waits(&with_seen), waits(&without_seen));
    assert_eq!(with_waits.len(), 60);
    // Every running job holds a whole node, so no victim is small enough to displace for one
    // GPU (it would strand seven: only whole-node work queues to take them up, so not even a's
    // own jobs go): with the allowance each debug job waits for the next node
    // to free up (jobs run 3 h) and then goes first.
    assert!(
        with_waits.iter().all(|&w| w <= 3 * HOUR),
        "with the allowance: {with_waits:?}"
    );
    // Without it, the two teams settle at exactly their shares (no rotation pays), a's
    // debug jobs rank behind b's queue, and most never start.
    let never = without_waits.iter().filter(|&&w| w == i64::MAX).count();
    assert!(never >= 30, "without the allowance: {without_waits:?}");
    // No team's owed delivery drops by more than rounding.
    let owed_pct = |m: &fairshare_sim::metrics::RunMetrics, path: &str| {
        let a = m.allocations.iter().find(|a| a.path == path).unwrap();
        a.delivered_owed_gpu_ms as f64 / a.owed_gpu_ms as f64
    };
    for team in ["a", "b"] {
        assert!(
            owed_pct(&with, team) >= owed_pct(&without, team) - 0.005,
            "{team}: {} with, {} without",
            owed_pct(&with, team),
            owed_pct(&without, team)
        );
    }
    assert!(with.owed_delivered_pct() >= without.owed_delivered_pct() - 0.5);
    assert_eq!((with.violations, without.violations), (0, 0));

    // With the share floor and the allowance (the defaults), every debug job starts within
    // 3 h too, and each team still gets nearly all its owed time (measured: a 98.8%, b
    // 99.1%; the 1-GPU debug jobs leave 7 GPUs of a node to the next placement, and whole-
    // node work cannot use them).
    let (floor_seen, floor) = run(&s);
    let floor_waits = waits(&floor_seen);
    assert!(
        floor_waits.iter().all(|&w| w <= 3 * HOUR),
        "with the floor: {floor_waits:?}"
    );
    for team in ["a", "b"] {
        assert!(
            owed_pct(&floor, team) >= 0.985,
            "{team}: {}",
            owed_pct(&floor, team)
        );
    }
    assert_eq!(floor.violations, 0);
}

#[test]
fn fragmented_free_gpus_are_packed_so_whole_node_jobs_start_at_once() {
    let s = scenario("fragmented");
    let (seen, m) = run(&s);
    let one = |name: &str| {
        let jobs = seen.named(name);
        assert_eq!(jobs.len(), 1, "{name}");
        jobs[0].clone()
    };
    let at = |t: i64| EPOCH_MS + t;
    // At 35 min: 2 GPUs free beside each protected job (node000, node001), 6 beside each small
    // job (node002, node003). The first big job's move: small-2 ordered off at once, stopped
    // 10 s later, placed again in the hole on node000; big-0 starts on node002.
    let (small2, small3) = (one("small-2"), one("small-3"));
    let (big0, big1) = (one("big-0"), one("big-1"));
    assert_eq!(small2.ordered, vec![at(35 * MIN)]);
    assert_eq!(small2.nodes, vec![vec!["node002"], vec!["node000"]]);
    assert_eq!(small2.runs[1].0, at(35 * MIN + 10 * S));
    assert_eq!(big0.wait(), Some(10 * S));
    assert_eq!(big0.nodes, vec![vec!["node002"]]);
    // Then the second, one move at a time: small-3 into node001's hole, big-1 on node003.
    assert_eq!(small3.ordered, vec![at(35 * MIN + 10 * S)]);
    assert_eq!(small3.nodes, vec![vec!["node003"], vec!["node001"]]);
    assert_eq!(big1.wait(), Some(20 * S));
    assert_eq!(big1.nodes, vec![vec!["node003"]]);
    // The protected jobs are never touched; only the two small jobs moved.
    for j in seen.named("protected-") {
        assert!(j.ordered.is_empty(), "{}", j.name);
    }
    assert_eq!(m.preemptions, 2);
    assert_eq!(m.violations, 0);
    // Lost work: the run since the last 30-minute checkpoint, 2 GPUs each: 5 min 10 s for
    // small-2 (stopped at 35:10), 5 min 20 s for small-3 (stopped at 35:20).
    assert_eq!(m.lost_gpu_ms, 2 * (310 + 320) * S as u128);
    assert_eq!(
        m.by_cause,
        [CausePreemptions {
            cause: PreemptionCause::Packing,
            orders: 2,
            stopped: 2,
            lost_gpu_ms: 2 * (310 + 320) * S as u128,
        }]
    );

    // Without packing moves, both wait until the small jobs end at 10 h.
    let config = EngineConfig {
        preemption: fairshare_preemption::domain::Config {
            packing: false,
            ..EngineConfig::default().preemption
        },
        ..EngineConfig::default()
    };
    let out = engine::run(&s.setup, &s.workload, &config, |_| {});
    let seen = read(&out.log);
    for big in seen.named("big-") {
        assert_eq!(big.wait(), Some(10 * HOUR - 35 * MIN), "{}", big.name);
    }
}

/// A floor order held back for lost work goes at the victim's next checkpoint: the services'
/// periodic pass (`EngineConfig::periodic_pass_ms`) meets it within 5 s; without it the
/// simulator wakes at the time the pass that held it back names
/// (`decide_preemptions_and_retry`), where it once waited for the next event.
///
/// Two 8-GPU nodes, `a` and `b` at 50% (floors of 8 GPUs). `a` runs 16 GPUs for 6 h, so the
/// window never favours it; from 6 h 15 min `b` holds all 16 GPUs in four 4-GPU jobs. At 7 h
/// `a` asks for 4 GPUs: below its floor, it may take one of `b`'s jobs (leaving `b` at 12),
/// but only within 10 minutes of that job's last checkpoint (they are 15 minutes past the one
/// at 6 h 45). The next checkpoint is at 7 h 15.
#[test]
fn a_floor_order_held_back_for_lost_work_goes_at_the_victims_next_checkpoint() {
    use fairshare_sim::scenarios::{flat_budget, job};
    use fairshare_sim::setup::Setup;
    use fairshare_sim::workload::Workload;

    let mut jobs = vec![job("a-big".into(), 0, "a", 16, 6 * HOUR, MIN)];
    for i in 0..4 {
        jobs.push(job(
            format!("b-{i}"),
            6 * HOUR + 15 * MIN,
            "b",
            4,
            10 * HOUR,
            MIN,
        ));
    }
    jobs.push(job("a-late".into(), 7 * HOUR, "a", 4, HOUR, 30 * MIN));
    let setup = Setup::new(
        flat_budget("sim", &[("a", 50), ("b", 50)]),
        Setup::uniform_nodes("node", 2, 8),
        EPOCH_MS + DAY,
    )
    .unwrap();
    let workload = Workload::new(jobs, Vec::new());
    let run_with = |periodic_pass_ms| {
        let config = EngineConfig {
            periodic_pass_ms,
            ..EngineConfig::default()
        };
        let out = engine::run(&setup, &workload, &config, |_| {});
        let metrics = measure("fairshare", &out.log, &measure_config(&setup, &config));
        (read(&out.log), metrics)
    };
    let late = |seen: &SeenLog| seen.named("a-late")[0].clone();

    // Without the periodic pass: the pass at 7 h holds the order back and names 7 h 15, the
    // victims' next checkpoint; the simulator passes then, orders one off with nothing lost
    // yet, and `a-late` starts when it stops, 10 s later. (Before that wake, nothing woke the
    // simulator at 7 h 15: the hourly floor's wake-ups at each hour's end all fall 15 minutes
    // after a checkpoint of `b`'s jobs, and `a-late` waited until `b`'s jobs ended, at 16 h 15.)
    let (seen, m) = run_with(None);
    assert_eq!(late(&seen).wait(), Some(15 * MIN + 10 * S));
    assert_eq!(m.preemptions, 1);

    // With a pass every 5 s: ordered at exactly 7 h 15 (a 5 s step from 7 h), stopped 10 s
    // later, 10 s of 4 GPUs lost; `a-late` starts then.
    let (seen, m) = run_with(Some(5 * S));
    assert_eq!(late(&seen).wait(), Some(15 * MIN + 10 * S));
    assert_eq!(m.preemptions, 1);
    assert_eq!(m.violations, 0);
    assert_eq!(
        m.by_cause,
        [CausePreemptions {
            cause: PreemptionCause::ShareFloor,
            orders: 1,
            stopped: 1,
            lost_gpu_ms: 4 * 10 * S as u128,
        }]
    );
}
