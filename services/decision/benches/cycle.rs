//! Decision cycle benchmark (plain `std::time::Instant`, no harness).
//!
//! Builds, through the real fold ([`DecisionState::apply`]), a cluster that is mostly full and
//! heavily oversubscribed, then times one full [`decide`] many times and reports the median and
//! the 99th percentile:
//!
//! - small: 128 nodes x 8 GPUs (1,024 GPUs), 10,000 queued jobs (SPEC goal: <= 2 ms);
//! - large: 2,048 nodes x 8 GPUs (16,384 GPUs), 100,000 queued jobs;
//!
//! and the growth ratio between them, plus each factor alone (16x nodes with the small queue,
//! 10x queue on the small cluster) to show where the growth comes from. Both use 150 allocations in a 4-level tree
//! (2 organisations x 3 programs x 5 projects x 5 teams), a usage snapshot for every
//! allocation, about 97% of GPUs held by running jobs (1 to 32 GPUs, a fifth of them
//! unallocated, minimum runtimes 15 min to 8 h, started over the last 8 hours), 1% of nodes
//! cordoned and a few maintenance windows ahead. Queued jobs: 40% 1 GPU, 15% 2, 15% 4, 20% 8,
//! 7% 2x8, 3% 4x8; a fifth unallocated; priorities 0-3.
//!
//! Run: `cargo bench -p fairshare-decision --bench cycle`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use fairshare_decision::domain::{DecisionState, decide};
use fairshare_events::pb::{self, event::Body};
use fairshare_model::budget::BudgetTree;
use fairshare_testkit::Rng;

const CLUSTER: &str = "h100-a";
const GPUS_PER_NODE: u32 = 8;
const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const WINDOW_MS: i64 = 7 * 24 * HOUR;
const NOW: i64 = 1_767_225_600_000 + 30 * 24 * HOUR;

fn uuid_like(rng: &mut Rng, t: i64) -> String {
    let r = rng.next_u64();
    format!(
        "{:08x}-{:04x}-7{:03x}-{:04x}-{:012x}",
        (t >> 16) as u32,
        (t & 0xffff) as u16,
        (r >> 52) & 0xfff,
        0x8000 | ((r >> 36) & 0x3fff),
        r & 0xffff_ffff_ffff
    )
}

/// 2 x 3 x 5 x 5 = 150 allocations, shares 1-10 (one team in twenty has share 0).
fn accounts(rng: &mut Rng) -> Vec<pb::Account> {
    let share = |rng: &mut Rng, can_be_zero: bool| {
        if can_be_zero && rng.below(20) == 0 {
            0
        } else {
            1 + rng.below(10)
        }
    };
    (0..2)
        .map(|o| pb::Account {
            name: format!("org{o}"),
            share: share(rng, false),
            children: (0..3)
                .map(|p| pb::Account {
                    name: format!("prog{p}"),
                    share: share(rng, false),
                    children: (0..5)
                        .map(|j| pb::Account {
                            name: format!("proj{j}"),
                            share: share(rng, false),
                            children: (0..5)
                                .map(|t| pb::Account {
                                    name: format!("team{t}"),
                                    share: share(rng, true),
                                    children: vec![],
                                })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

fn min_runtime_s(rng: &mut Rng) -> i64 {
    match rng.below(10) {
        0 | 1 => 0,
        2 | 3 => 15 * 60,
        4 | 5 => 3600,
        6 | 7 => 4 * 3600,
        _ => 8 * 3600,
    }
}

/// (nodes, GPUs per node) of a queued job.
fn queued_shape(rng: &mut Rng) -> (u32, u32) {
    match rng.below(100) {
        0..40 => (1, 1),
        40..55 => (1, 2),
        55..70 => (1, 4),
        70..90 => (1, 8),
        90..97 => (2, 8),
        _ => (4, 8),
    }
}

struct Log {
    events: Vec<pb::Event>,
}

impl Log {
    fn push(&mut self, at_ms: i64, body: Body) {
        self.events.push(pb::Event {
            at_ms,
            body: Some(body),
        });
    }

    fn submit(
        &mut self,
        at: i64,
        id: &str,
        allocation: &str,
        shape: (u32, u32),
        mr: i64,
        rng: &mut Rng,
    ) {
        self.push(
            at,
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: id.to_owned(),
                idempotency_key: format!("k-{id}"),
                spec: Some(pb::JobSpec {
                    cluster: CLUSTER.into(),
                    allocation: allocation.to_owned(),
                    user: "u".into(),
                    gpus: i64::from(shape.0 * shape.1),
                    nodes: i64::from(shape.0),
                    min_runtime_s: mr,
                    resumable: true,
                    priority: rng.below(4) as i32,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes: shape.0,
                    gpus_per_node: shape.1,
                }),
            }),
        );
    }
}

fn build(nodes: usize, queued: usize, seed: u64) -> DecisionState {
    let mut rng = Rng(seed);
    let mut log = Log { events: Vec::new() };
    let accounts = accounts(&mut rng);
    let tree = match BudgetTree::from_accounts(&accounts) {
        Ok(t) => t,
        Err(e) => panic!("bench tree is invalid: {e}"),
    };
    let allocations: Vec<String> = tree.allocation_paths().map(str::to_owned).collect();
    log.push(
        0,
        Body::BudgetTreeSet(pb::BudgetTreeSet {
            cluster: CLUSTER.into(),
            accounts,
        }),
    );
    let names: Vec<String> = (0..nodes).map(|i| format!("gpu-{i:05}")).collect();
    for n in &names {
        log.push(
            0,
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: CLUSTER.into(),
                node: n.clone(),
                gpus: GPUS_PER_NODE,
            }),
        );
    }
    for n in names.iter().step_by(100) {
        log.push(
            NOW - HOUR,
            Body::NodeCordoned(pb::NodeCordoned {
                cluster: CLUSTER.into(),
                node: n.clone(),
                reason: "bench".into(),
            }),
        );
    }
    let maint: Vec<String> = names.iter().skip(7).step_by(64).cloned().collect();
    log.push(
        NOW - HOUR,
        Body::MaintenanceScheduled(pb::MaintenanceScheduled {
            cluster: CLUSTER.into(),
            nodes: maint,
            start_ms: NOW + 3 * HOUR,
            end_ms: NOW + 5 * HOUR,
            reason: "bench".into(),
        }),
    );

    // Running set: walk the nodes, filling each; now and then a whole-node group for a
    // multi-node job; about 3% of GPUs left free in scattered holes.
    let mut i = 0;
    while i < nodes {
        let start = NOW - rng.below(8 * 60) as i64 * MIN;
        let alloc = &allocations[rng.below(allocations.len() as u64) as usize];
        let mr = min_runtime_s(&mut rng);
        if rng.below(20) == 0 && i + 4 <= nodes {
            let k = 2 + rng.below(3) as usize;
            let id = uuid_like(&mut rng, start);
            log.submit(start, &id, alloc, (k as u32, GPUS_PER_NODE), mr, &mut rng);
            let placed: Vec<pb::NodeGpus> = names[i..i + k]
                .iter()
                .map(|n| pb::NodeGpus {
                    node: n.clone(),
                    gpus: GPUS_PER_NODE,
                })
                .collect();
            log.push(
                start,
                Body::JobPlaced(pb::JobPlaced {
                    job_id: id.clone(),
                    nodes: placed,
                    basis: None,
                }),
            );
            log.push(start, Body::JobStarted(pb::JobStarted { job_id: id }));
            i += k;
            continue;
        }
        let mut left = GPUS_PER_NODE;
        while left > 0 {
            let g = [1, 1, 2, 4, 8][rng.below(5) as usize].min(left);
            left -= g;
            if rng.below(100) < 3 {
                continue; // a hole
            }
            let start = NOW - rng.below(8 * 60) as i64 * MIN;
            let alloc = &allocations[rng.below(allocations.len() as u64) as usize];
            let mr = min_runtime_s(&mut rng);
            let id = uuid_like(&mut rng, start);
            log.submit(start, &id, alloc, (1, g), mr, &mut rng);
            log.push(
                start,
                Body::JobPlaced(pb::JobPlaced {
                    job_id: id.clone(),
                    nodes: vec![pb::NodeGpus {
                        node: names[i].clone(),
                        gpus: g,
                    }],
                    basis: None,
                }),
            );
            log.push(start, Body::JobStarted(pb::JobStarted { job_id: id }));
        }
        i += 1;
    }

    // Queue.
    for _ in 0..queued {
        let at = NOW - rng.below(48 * 60) as i64 * MIN;
        let alloc = &allocations[rng.below(allocations.len() as u64) as usize];
        let shape = queued_shape(&mut rng);
        let mr = min_runtime_s(&mut rng);
        let id = uuid_like(&mut rng, at);
        log.submit(at, &id, alloc, shape, mr, &mut rng);
    }

    // Usage snapshot: allocated time = fraction x capacity x window; charged 0-2x of it.
    let capacity_window = u128::from(nodes as u64 * u64::from(GPUS_PER_NODE)) * WINDOW_MS as u128;
    let rows = allocations
        .iter()
        .map(|path| {
            let f = tree.fraction(tree.allocation(path).unwrap_or(0));
            let allocated = (capacity_window * f.num / f.den) as u64;
            let charged = allocated / 100 * rng.below(200);
            pb::AllocationUsage {
                allocation: path.clone(),
                charged_gpu_ms: charged,
                allocated_gpu_ms: allocated,
            }
        })
        .collect();
    log.push(
        NOW - 5 * MIN,
        Body::UsageSnapshot(pb::UsageSnapshot {
            cluster: CLUSTER.into(),
            window_end_ms: NOW - 5 * MIN,
            window_ms: WINDOW_MS,
            through_sequence: log.events.len() as u64,
            allocations: rows,
            unallocated_gpu_ms: 0,
        }),
    );

    let mut state = DecisionState::new(CLUSTER);
    let t = Instant::now();
    let mut ignored = 0;
    for (seq, e) in log.events.iter().enumerate() {
        if state.apply(seq as u64 + 1, e).is_err() {
            ignored += 1;
        }
    }
    let elapsed = t.elapsed();
    println!(
        "  built: {} events folded in {:.1} ms ({:.2} M events/s), {} ignored",
        log.events.len(),
        elapsed.as_secs_f64() * 1e3,
        log.events.len() as f64 / elapsed.as_secs_f64() / 1e6,
        ignored
    );
    state
}

struct Figures {
    median: Duration,
    p99: Duration,
}

fn run(label: &str, nodes: usize, queued: usize, iterations: usize) -> Figures {
    println!(
        "{label}: {nodes} nodes x {GPUS_PER_NODE} GPUs, {queued} queued jobs, 150 allocations"
    );
    let state = build(nodes, queued, 0x5eed_0000 + nodes as u64);
    let d = decide(&state, NOW);
    let held: u64 = state
        .inventory()
        .nodes()
        .keys()
        .map(|n| u64::from(state.load(n).map_or(0, |l| l.used)))
        .sum();
    let placed_gpus: u32 = d
        .placements
        .iter()
        .flat_map(|p| p.nodes.iter().map(|n| n.gpus))
        .sum();
    println!(
        "  cluster: {} of {} GPUs held; cycle places {} jobs ({} GPUs), leaves {} waiting, reservation: {}",
        held,
        nodes as u64 * u64::from(GPUS_PER_NODE),
        d.placements.len(),
        placed_gpus,
        d.waiting.len(),
        d.reservation
            .as_ref()
            .map_or("none".to_owned(), |r| format!(
                "{} GPUs from now+{} min",
                r.nodes.iter().map(|n| n.gpus).sum::<u32>(),
                (r.start_ms - NOW) / MIN
            )),
    );
    for _ in 0..3 {
        black_box(decide(black_box(&state), NOW));
    }
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        let d = decide(black_box(&state), black_box(NOW));
        times.push(t.elapsed());
        black_box(d);
    }
    times.sort_unstable();
    let median = times[times.len() / 2];
    let p99 = times[(times.len() * 99).div_ceil(100).saturating_sub(1)];
    println!(
        "  decide: median {:.3} ms, p99 {:.3} ms, min {:.3} ms over {} cycles ({:.0} ns per queued job)",
        median.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        iterations,
        median.as_secs_f64() * 1e9 / queued as f64
    );
    // What `fairshare queue` costs the service: a whole decide, the listing, its encoding.
    let request = fairshare_events::pb::QueueRequest::default();
    let mut listing_times: Vec<Duration> = (0..iterations.min(40))
        .map(|_| {
            let t = Instant::now();
            let listed = fairshare_decision::domain::listing(black_box(&state), &request, NOW);
            let bytes = listed.map(|l| fairshare_events::codec::encode(&l).len());
            black_box(bytes.ok());
            t.elapsed()
        })
        .collect();
    listing_times.sort_unstable();
    let (matched, bytes) = fairshare_decision::domain::listing(&state, &request, NOW)
        .map_or((0, 0), |l| {
            (l.matched, fairshare_events::codec::encode(&l).len())
        });
    println!(
        "  queue listing (first 2,000 of {matched} live jobs, {} KiB encoded): median {:.3} ms",
        bytes / 1024,
        listing_times[listing_times.len() / 2].as_secs_f64() * 1e3
    );
    Figures { median, p99 }
}

fn main() {
    // `cargo bench ... -- queue-only` (or `nodes-only`) runs one single-factor case, for
    // profiling.
    if std::env::args().any(|a| a == "queue-only") {
        run("small cluster, large queue", 128, 100_000, 60);
        return;
    }
    if std::env::args().any(|a| a == "nodes-only") {
        run("large cluster, small queue", 2_048, 10_000, 400);
        return;
    }
    let small = run("small", 128, 10_000, 500);
    let large = run("large", 2_048, 100_000, 60);
    // Where the growth comes from: each factor alone.
    let nodes_only = run("large cluster, small queue", 2_048, 10_000, 200);
    let queue_only = run("small cluster, large queue", 128, 100_000, 60);
    println!(
        "growth from 16x nodes alone: median x{:.1}; from 10x queue alone: median x{:.1}",
        nodes_only.median.as_secs_f64() / small.median.as_secs_f64(),
        queue_only.median.as_secs_f64() / small.median.as_secs_f64(),
    );
    println!(
        "growth small -> large (16x GPUs, 10x queue): median x{:.1}, p99 x{:.1}; goal for small <= 2 ms: {}",
        large.median.as_secs_f64() / small.median.as_secs_f64(),
        large.p99.as_secs_f64() / small.p99.as_secs_f64(),
        if small.p99 <= Duration::from_millis(2) {
            "met (p99)"
        } else if small.median <= Duration::from_millis(2) {
            "met (median), not at p99"
        } else {
            "NOT met"
        }
    );
}
