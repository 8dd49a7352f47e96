//! Victim selection benchmark (plain `std::time::Instant`, no harness).
//!
//! Builds, through the real fold ([`PreemptionState::apply`]), a full cluster of 128 nodes x
//! 8 GPUs (1,024 GPUs) held by 1,000 running jobs (976 of 1 GPU, 24 of 2 GPUs; a fifth
//! unallocated; minimum runtimes 15 min to 8 h; started over the last 8 hours, so most are past
//! their minimum runtime), 150 allocations in a 4-level tree (2 x 3 x 5 x 5) with a usage
//! snapshot for each, and 1,000 queued jobs (1 to 8 GPUs and 2x8, a fifth unallocated). Then
//! times, many times each, and reports the median and the 99th percentile of:
//!
//! - `decide_preemptions`: a whole pass (grace, drains, the rank-order walk to the first job
//!   that does not fit, and its victims);
//! - `select_victims` for one 8-GPU waiter (every node searched);
//! - `select_victims` for one 2x8-GPU waiter (whole nodes);
//!
//! each with the share floor on (the services' setting) and off (the window alone).
//!
//! Run: `cargo bench -p fairshare-preemption --bench victims`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use fairshare_events::pb::{self, event::Body};
use fairshare_preemption::domain::{Config, PreemptionState, decide_preemptions, select_victims};
use fairshare_testkit::Rng;

const CLUSTER: &str = "h100-a";
const NODES: usize = 128;
const GPUS_PER_NODE: u32 = 8;
const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const WINDOW_MS: i64 = 7 * 24 * HOUR;
const NOW: i64 = 1_767_225_600_000 + 30 * 24 * HOUR;

struct Builder {
    state: PreemptionState,
    seq: u64,
}

impl Builder {
    fn apply(&mut self, at: i64, body: Body) {
        self.seq += 1;
        let event = pb::Event {
            at_ms: at,
            body: Some(body),
        };
        if let Err(e) = self.state.apply(self.seq, &event) {
            panic!("bench setup event refused: {e}");
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(&mut self, at: i64, id: &str, allocation: &str, nodes: u32, gpn: u32, mr_s: i64) {
        self.apply(
            at,
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: id.into(),
                idempotency_key: id.into(),
                spec: Some(pb::JobSpec {
                    cluster: CLUSTER.into(),
                    allocation: allocation.into(),
                    gpus: i64::from(nodes * gpn),
                    nodes: i64::from(nodes),
                    min_runtime_s: mr_s,
                    resumable: true,
                    ..Default::default()
                }),
                shape: Some(pb::Shape {
                    nodes,
                    gpus_per_node: gpn,
                }),
            }),
        );
    }
}

fn account(name: String, children: Vec<pb::Account>, share: u64) -> pb::Account {
    pb::Account {
        name,
        share,
        children,
    }
}

fn build() -> (PreemptionState, String, String) {
    let mut rng = Rng(0x5eed);
    let mut b = Builder {
        state: PreemptionState::new(CLUSTER),
        seq: 0,
    };
    // 2 organisations x 3 programs x 5 projects x 5 teams = 150 allocations.
    let mut leaves = Vec::new();
    let mut orgs = Vec::new();
    for o in 0..2 {
        let mut programs = Vec::new();
        for p in 0..3 {
            let mut projects = Vec::new();
            for j in 0..5 {
                let mut teams = Vec::new();
                for t in 0..5 {
                    leaves.push(format!("o{o}/p{p}/j{j}/t{t}"));
                    teams.push(account(format!("t{t}"), vec![], 1 + rng.below(5)));
                }
                projects.push(account(format!("j{j}"), teams, 1 + rng.below(5)));
            }
            programs.push(account(format!("p{p}"), projects, 1 + rng.below(5)));
        }
        orgs.push(account(format!("o{o}"), programs, 1 + rng.below(5)));
    }
    b.apply(
        0,
        Body::BudgetTreeSet(pb::BudgetTreeSet {
            cluster: CLUSTER.into(),
            accounts: orgs,
        }),
    );
    for n in 0..NODES {
        b.apply(
            0,
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: CLUSTER.into(),
                node: format!("node{n:03}"),
                gpus: GPUS_PER_NODE,
            }),
        );
    }
    // 1,000 running jobs fill all 1,024 GPUs: 24 of 2 GPUs first, then 976 of 1 GPU.
    let mrs = [15 * 60, 3600, 4 * 3600, 8 * 3600];
    let mut slot = 0u32;
    for i in 0..1000 {
        let gpus = if i < 24 { 2 } else { 1 };
        let node = format!("node{:03}", slot / GPUS_PER_NODE);
        slot += gpus;
        let id = format!("run{i:04}");
        let allocation = &leaves[rng.below(leaves.len() as u64) as usize];
        let mr = if rng.below(5) == 0 {
            0
        } else {
            mrs[rng.below(4) as usize]
        };
        let start = NOW - (1 + rng.below(8 * 60) as i64) * MIN;
        b.submit(start - MIN, &id, allocation, 1, gpus, mr);
        b.apply(
            start,
            Body::JobPlaced(pb::JobPlaced {
                job_id: id.clone(),
                nodes: vec![pb::NodeGpus { node, gpus }],
                basis: None,
            }),
        );
        b.apply(start, Body::JobStarted(pb::JobStarted { job_id: id }));
    }
    b.apply(
        NOW,
        Body::UsageSnapshot(pb::UsageSnapshot {
            cluster: CLUSTER.into(),
            window_end_ms: NOW,
            window_ms: WINDOW_MS,
            through_sequence: b.seq,
            allocations: leaves
                .iter()
                .map(|l| pb::AllocationUsage {
                    allocation: l.clone(),
                    charged_gpu_ms: rng.below(200) * HOUR as u64,
                    allocated_gpu_ms: 1024 * WINDOW_MS as u64 / 150,
                })
                .collect(),
            unallocated_gpu_ms: 0,
        }),
    );
    // 1,000 queued jobs.
    for q in 0..1000 {
        let (nodes, gpn) = match rng.below(20) {
            0 => (2, 8),
            1..=4 => (1, 8),
            5..=7 => (1, 4),
            8..=10 => (1, 2),
            _ => (1, 1),
        };
        let mr = if rng.below(5) == 0 {
            0
        } else {
            mrs[rng.below(4) as usize]
        };
        let allocation = leaves[rng.below(leaves.len() as u64) as usize].clone();
        b.submit(
            NOW - 1000 + q,
            &format!("q{q:04}"),
            &allocation,
            nodes,
            gpn,
            mr,
        );
    }
    // Two named waiters from a lightly used allocation.
    let light = leaves[0].clone();
    b.submit(NOW - 1, "wait-8", &light, 1, 8, 3600);
    b.submit(NOW - 1, "wait-2x8", &light, 2, 8, 3600);
    (b.state, "wait-8".into(), "wait-2x8".into())
}

fn time<F: FnMut()>(runs: usize, mut f: F) -> (Duration, Duration) {
    for _ in 0..runs / 10 {
        f();
    }
    let mut samples: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort_unstable();
    let p99 = samples[(runs * 99 / 100).min(runs - 1)];
    (samples[runs / 2], p99)
}

fn main() {
    let cfg = Config::default();
    let (mut state, w8, w16) = build();
    println!(
        "cluster: {} nodes x {} GPUs, {} queued, {} events folded",
        NODES,
        GPUS_PER_NODE,
        state.decision().queued_len(),
        state.last_applied()
    );
    // With the share floor (the services' setting) and by the window alone: the floor keeps
    // most allocations' work here, so the victim search ends early more often.
    for share_floor in [true, false] {
        state.set_share_floor(share_floor);
        println!("share floor {}:", if share_floor { "on" } else { "off" });
        let out = decide_preemptions(&state, NOW, &cfg);
        println!("  decide_preemptions orders {} victims", out.len());
        for (name, id) in [("8-GPU", &w8), ("2x8-GPU", &w16)] {
            match select_victims(&state, id, NOW, &cfg) {
                Ok(plan) => println!(
                    "  {name} waiter: {} victims on {:?}, lost {:.2} GPU-h",
                    plan.victims.len(),
                    plan.nodes,
                    plan.lost_gpu_ms as f64 / HOUR as f64
                ),
                Err(e) => println!("  {name} waiter: {e}"),
            }
        }
        let runs = 300;
        let (m, p) = time(runs, || {
            black_box(decide_preemptions(black_box(&state), NOW, &cfg));
        });
        println!("  decide_preemptions      median {m:>10.2?}  p99 {p:>10.2?}");
        let (m, p) = time(runs, || {
            let _ = black_box(select_victims(black_box(&state), &w8, NOW, &cfg));
        });
        println!("  select_victims 8 GPUs   median {m:>10.2?}  p99 {p:>10.2?}");
        let (m, p) = time(runs, || {
            let _ = black_box(select_victims(black_box(&state), &w16, NOW, &cfg));
        });
        println!("  select_victims 2x8 GPUs median {m:>10.2?}  p99 {p:>10.2?}");
    }
}
