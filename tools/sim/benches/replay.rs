//! Simulator speed: 30 simulated days of a 1,024-GPU cluster replaying the msft-itp trace
//! (SPEC section 6: <= 0.5 s; issue: <= 5 s), for fairshare and each baseline, plus the whole
//! Helios trace on 256 GPUs.
//!
//! `cargo bench -p fairshare-sim --bench replay` (rounds: `FAIRSHARE_BENCH_ROUNDS`, default 3).
//! Times are wall-clock medians of the rounds, one policy at a time on one core; mapping the
//! trace and measuring the log are outside the timed part. For fairshare it also prints where
//! the time of one more round went, a round that reads the clock around each part
//! ([`fairshare_sim::engine::times`]): each service's fold, the decision cycles and preemption
//! passes, each counted once.

use std::time::{Duration, Instant};

use fairshare_model::trace::parse_replay;
use fairshare_sim::baseline;
use fairshare_sim::engine::times::{Part, PartTimes};
use fairshare_sim::engine::{self, EngineConfig, EngineStats};
use fairshare_sim::mapping::MappingRules;
use fairshare_sim::setup::{EPOCH_MS, Setup};
use fairshare_sim::simulate::Policy;
use fairshare_sim::workload::Workload;

/// The same allocator as the `fairshare-sim` binary, so the bench times what users run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DAY: i64 = 24 * 3_600_000;

fn workload(trace: &str, nodes: usize, days: i64) -> (Setup, Workload) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let text = std::fs::read_to_string(format!("{root}/tests/data/traces/{trace}/replay.csv"))
        .expect("the trace is in tests/data/traces");
    let budget = std::fs::read_to_string(format!("{root}/deploy/sim/budget.toml"))
        .expect("deploy/sim/budget.toml");
    let budget = fairshare_model::files::parse_budget(&budget).expect("a valid budget");
    let setup = Setup::new(
        budget,
        Setup::uniform_nodes("node", nodes, 8),
        EPOCH_MS + days * DAY,
    )
    .expect("a valid setup");
    let rules = MappingRules {
        span_ms: days * DAY,
        ..MappingRules::default()
    };
    let jobs = rules.map(
        &parse_replay(&text).expect("a valid trace"),
        &setup.allocations(),
    );
    (setup, Workload::new(jobs, Vec::new()))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench(name: &str, setup: &Setup, workload: &Workload, rounds: usize) {
    println!(
        "{name}: {} GPUs, {} days, {} jobs, demand/supply {:.2}",
        setup.total_gpus(),
        (setup.end_ms - EPOCH_MS) / DAY,
        workload.jobs.len(),
        workload.demand_over_supply(setup)
    );
    let config = EngineConfig::default();
    for policy in Policy::all() {
        let mut times = Vec::new();
        let mut events = 0;
        for _ in 0..rounds {
            let started = Instant::now();
            let log = match policy {
                Policy::Fairshare => engine::run(setup, workload, &config, |_| {}).log,
                Policy::Baseline(b) => baseline::run(b, setup, workload),
            };
            times.push(started.elapsed());
            events = log.len();
        }
        let m = median(times.clone());
        println!(
            "  {:<20} median {:>8.3} s  (rounds {:?})  {} events, {:.0} events/s",
            policy.name(),
            m.as_secs_f64(),
            times
                .iter()
                .map(|t| format!("{:.3}", t.as_secs_f64()))
                .collect::<Vec<_>>(),
            events,
            events as f64 / m.as_secs_f64()
        );
        if policy == Policy::Fairshare {
            // The parts from one more round that reads the clock around each (the rounds
            // above do not: timing costs about 2% of the wall time).
            let timed = EngineConfig {
                time_parts: true,
                ..config.clone()
            };
            let started = Instant::now();
            let run = engine::run(setup, workload, &timed, |_| {});
            print_parts(started.elapsed(), &run.times, &run.stats);
        }
    }
}

/// Where a timed fairshare round's time went, part by part, and how often each ran.
fn print_parts(wall: Duration, parts: &PartTimes, stats: &EngineStats) {
    println!(
        "    a timed round, {:.3} s: {} steps, {} decision cycles ({} placing, {} known \
         empty), {} preemption passes, {} snapshots:",
        wall.as_secs_f64(),
        stats.steps,
        stats.cycles,
        stats.placing_cycles,
        stats.known_empty_cycles,
        stats.passes,
        stats.snapshots
    );
    let share = |d: Duration| 100.0 * d.as_secs_f64() / wall.as_secs_f64().max(1e-9);
    for part in Part::ALL {
        let d = parts.get(part);
        println!(
            "      {:<34} {:>7.3} s  {:>5.1}%",
            part.name(),
            d.as_secs_f64(),
            share(d)
        );
    }
    let rest = wall.saturating_sub(parts.total());
    println!(
        "      {:<34} {:>7.3} s  {:>5.1}%",
        "the rest (agenda, launcher, log)",
        rest.as_secs_f64(),
        share(rest)
    );
}

fn main() {
    // As the binary does (`fairshare_sim::memory`): the bench times what users run.
    let _ = fairshare_sim::memory::prefer_small_pages();
    let rounds = std::env::var("FAIRSHARE_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3usize)
        .max(1);
    let (setup, work) = workload("msft-itp", 128, 30);
    bench("msft-itp, 30 days", &setup, &work, rounds);
    let (setup, work) = workload("helios-15k", 32, 21);
    bench("helios-15k, whole trace", &setup, &work, rounds);
}
