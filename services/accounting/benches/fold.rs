//! Accounting fold benchmark (plain `std::time::Instant`, no harness).
//!
//! Builds a realistic encoded stream: one cluster of 128 nodes x 8 GPUs, a 4-level budget tree
//! (org -> 10 programs -> 10 projects -> 10 teams = 1,000 allocations), and a synthetic workload
//! of jobs (1 to 16 GPUs, minutes to 8 hours, about 1 in 5 unallocated, some ordered off,
//! preempted and requeued) submitted, placed, started and stopped over months, so the 7-day window slides and
//! evicts all along. Then, on one core, it measures:
//!
//! - events decoded per second (`fairshare_events::codec::decode_event`) alone;
//! - events decoded AND applied per second (the SPEC target is >= 2 million/s), hence the
//!   cost of applying alone;
//! - one window query over all 1,000 allocations (and their subtrees), in microseconds;
//! - a single-account query and a ledger report;
//! - memory after folding 7 days and 60 days of the real msft-itp trace
//!   (`tests/data/traces/msft-itp/replay.csv`: each job submitted, started at its submit time
//!   and finished after its observed duration, charged to an allocation per source cluster),
//!   as the fold's footprint and the size of its bincode checkpoint.
//!
//! Run: `cargo bench -p fairshare-accounting --bench fold` (add a job count to change the size:
//! `cargo bench -p fairshare-accounting --bench fold -- 2000000`). With the environment variable
//! `FOLD_BENCH_ONLY_APPLY` set, only the decode + apply loop runs (for `perf record`).
//!
//! Figures are wall-clock on whatever else the machine is doing; each is the best of several
//! rounds, which is the figure least disturbed by other work.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fairshare_accounting::domain::{FoldConfig, UsageFold};
use fairshare_events::codec;
use fairshare_events::pb::{self, event::Body};
use fairshare_testkit::Rng;

const CLUSTER: &str = "h100-a";
const NODES: u32 = 128;
const GPUS_PER_NODE: u32 = 8;
const HOUR: i64 = 3_600_000;
const START_MS: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

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

fn allocation_path(i: usize) -> String {
    format!("org/prog{}/proj{}/team{}", i / 100, (i / 10) % 10, i % 10)
}

fn tree(version: u64) -> pb::BudgetTreeSet {
    let team = |k: u64| pb::Account {
        name: format!("team{k}"),
        share: 1 + (k + version) % 5,
        children: vec![],
    };
    let proj = |j: u64| pb::Account {
        name: format!("proj{j}"),
        share: 1 + (j * 3 + version) % 7,
        children: (0..10).map(team).collect(),
    };
    let prog = |i: u64| pb::Account {
        name: format!("prog{i}"),
        share: 10 + (i * 7 + version) % 30,
        children: (0..10).map(proj).collect(),
    };
    pb::BudgetTreeSet {
        cluster: CLUSTER.into(),
        accounts: vec![pb::Account {
            name: "org".into(),
            share: 1,
            children: (0..10).map(prog).collect(),
        }],
    }
}

fn ev(at_ms: i64, body: Body) -> pb::Event {
    pb::Event {
        at_ms,
        body: Some(body),
    }
}

/// The synthetic stream, in time order, and the time of its last event.
fn workload(jobs: usize) -> (Vec<pb::Event>, i64) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // (time, tie-break, event): sorted at the end, ties kept in generation order.
    let mut timed: Vec<(i64, u64, pb::Event)> = Vec::with_capacity(jobs * 4 + 2_000);
    let mut order = 0u64;
    let mut push = |timed: &mut Vec<(i64, u64, pb::Event)>, t: i64, body: Body| {
        order += 1;
        timed.push((t, order, ev(t, body)));
    };
    for n in 0..NODES {
        let body = Body::NodeRegistered(pb::NodeRegistered {
            cluster: CLUSTER.into(),
            node: format!("node{n:03}"),
            gpus: GPUS_PER_NODE,
        });
        push(&mut timed, START_MS, body);
    }
    push(&mut timed, START_MS, Body::BudgetTreeSet(tree(0)));
    // About 1,024 GPUs busy: mean job ~ 4.6 GPUs x ~1.6 h, so ~140 jobs an hour.
    let mut t = START_MS;
    let payload = Bytes::from(vec![b'x'; 96]);
    for i in 0..jobs {
        t += 1 + rng.below(2 * HOUR as u64 / 140) as i64;
        let id = uuid_like(&mut rng, t);
        let (nodes, gpn) = match rng.below(10) {
            0..=3 => (1, 1),
            4..=5 => (1, 2),
            6 => (1, 4),
            7..=8 => (1, 8),
            _ => (2, 8),
        };
        let allocated = rng.below(5) != 0;
        let allocation = allocation_path(rng.below(1_000) as usize);
        let spec = pb::JobSpec {
            cluster: CLUSTER.into(),
            allocation,
            user: format!("user{}", rng.below(150)),
            gpus: i64::from(nodes * gpn),
            nodes: i64::from(nodes),
            min_runtime_s: if allocated { 1_800 } else { 0 },
            resumable: true,
            priority: (rng.below(3)) as i32,
            time_limit_s: 0,
            payload: payload.clone(),
            name: format!("train-{i}"),
        };
        let submitted = Body::JobSubmitted(pb::JobSubmitted {
            job_id: id.clone(),
            idempotency_key: format!("launcher-7:{i}"),
            spec: Some(spec),
            shape: Some(pb::Shape {
                nodes,
                gpus_per_node: gpn,
            }),
        });
        push(&mut timed, t, submitted);
        let wait = rng.below(2 * HOUR as u64) as i64;
        let mut start = t + wait;
        let placed = Body::JobPlaced(pb::JobPlaced {
            job_id: id.clone(),
            nodes: vec![pb::NodeGpus {
                node: format!("node{:03}", rng.below(u64::from(NODES))),
                gpus: nodes * gpn,
            }],
            basis: Some(pb::DecisionBasis {
                through_sequence: i as u64,
                computed_at_ms: start,
                cycle: i as u64,
                ..Default::default()
            }),
        });
        push(&mut timed, start, placed);
        push(
            &mut timed,
            start,
            Body::JobStarted(pb::JobStarted { job_id: id.clone() }),
        );
        let run = 60_000 + rng.below(8 * HOUR as u64 / 3) as i64;
        if rng.below(10) == 0 {
            // Ordered off part-way (a 60 s grace), stopped 20 s later, requeued, started
            // again later.
            let cut = start + run / 2;
            let body = Body::PreemptionOrdered(pb::PreemptionOrdered {
                job_id: id.clone(),
                grace_deadline_ms: cut + 40_000,
                ..Default::default()
            });
            push(&mut timed, cut - 20_000, body);
            let body = Body::JobPreempted(pb::JobPreempted {
                job_id: id.clone(),
                killed: false,
            });
            push(&mut timed, cut, body);
            let body = Body::JobRequeued(pb::JobRequeued { job_id: id.clone() });
            push(&mut timed, cut, body);
            start = cut + rng.below(HOUR as u64) as i64;
            let body = Body::JobPlaced(pb::JobPlaced {
                job_id: id.clone(),
                nodes: vec![pb::NodeGpus {
                    node: format!("node{:03}", rng.below(u64::from(NODES))),
                    gpus: nodes * gpn,
                }],
                basis: None,
            });
            push(&mut timed, start, body);
            let body = Body::JobStarted(pb::JobStarted { job_id: id.clone() });
            push(&mut timed, start, body);
        }
        let end = start + run;
        let body = if rng.below(20) == 0 {
            Body::JobFailed(pb::JobFailed {
                job_id: id,
                reason: "exit 1".into(),
            })
        } else {
            Body::JobFinished(pb::JobFinished {
                job_id: id,
                exit_code: 0,
            })
        };
        push(&mut timed, end, body);
    }
    // A budget change every week, and a node out for repair every day.
    let last = timed.iter().map(|(t, _, _)| *t).max().unwrap_or(START_MS);
    let mut day = 0;
    let mut at = START_MS + 24 * HOUR;
    while at < last {
        day += 1;
        let node = format!("node{:03}", day % i64::from(NODES));
        let body = Body::NodeRemoved(pb::NodeRemoved {
            cluster: CLUSTER.into(),
            node: node.clone(),
        });
        push(&mut timed, at, body);
        let body = Body::NodeRegistered(pb::NodeRegistered {
            cluster: CLUSTER.into(),
            node,
            gpus: GPUS_PER_NODE,
        });
        push(&mut timed, at + 6 * HOUR, body);
        if day % 7 == 0 {
            push(&mut timed, at, Body::BudgetTreeSet(tree(day as u64)));
        }
        at += 24 * HOUR;
    }
    timed.sort_by_key(|(t, o, _)| (*t, *o));
    (timed.into_iter().map(|(_, _, e)| e).collect(), last)
}

/// The msft-itp trace as a stream, in time order (empty if the file is not there).
fn msft_itp() -> Result<Vec<pb::Event>, Box<dyn std::error::Error>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/traces/msft-itp/replay.csv"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(Vec::new());
    };
    let mut timed: Vec<(i64, u64, pb::Event)> = Vec::new();
    let mut order = 0u64;
    let mut push = |t: i64, body: Body| {
        order += 1;
        timed.push((t, order, ev(t, body)));
    };
    push(
        START_MS,
        Body::NodeRegistered(pb::NodeRegistered {
            cluster: "itp".into(),
            node: "pool".into(),
            gpus: 1_024,
        }),
    );
    let groups: Vec<pb::Account> = (1..=10)
        .map(|g| pb::Account {
            name: format!("cluster{g:02}"),
            share: g,
            children: vec![],
        })
        .collect();
    push(
        START_MS,
        Body::BudgetTreeSet(pb::BudgetTreeSet {
            cluster: "itp".into(),
            accounts: vec![pb::Account {
                name: "itp".into(),
                share: 1,
                children: groups,
            }],
        }),
    );
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(id), Some(submit), Some(duration), Some(gpus), Some(group)) =
            (f.first(), f.get(1), f.get(2), f.get(3), f.get(5))
        else {
            continue;
        };
        let submit = START_MS + submit.parse::<i64>()? * 1_000;
        let end = submit + duration.parse::<i64>()? * 1_000;
        let gpus: u32 = gpus.parse()?;
        let spec = pb::JobSpec {
            cluster: "itp".into(),
            allocation: format!("itp/{group}"),
            gpus: i64::from(gpus),
            min_runtime_s: 1_800,
            ..Default::default()
        };
        let body = Body::JobSubmitted(pb::JobSubmitted {
            job_id: (*id).to_owned(),
            idempotency_key: (*id).to_owned(),
            spec: Some(spec),
            shape: Some(pb::Shape {
                nodes: 1,
                gpus_per_node: gpus,
            }),
        });
        push(submit, body);
        // Placed and started at once (a start is folded only for a placed job).
        let placed = Body::JobPlaced(pb::JobPlaced {
            job_id: (*id).to_owned(),
            nodes: vec![pb::NodeGpus {
                node: "itp".into(),
                gpus,
            }],
            basis: None,
        });
        push(submit, placed);
        let job_id = (*id).to_owned();
        push(submit, Body::JobStarted(pb::JobStarted { job_id }));
        let job_id = (*id).to_owned();
        let body = Body::JobFinished(pb::JobFinished {
            job_id,
            exit_code: 0,
        });
        push(end, body);
    }
    timed.sort_by_key(|(t, o, _)| (*t, *o));
    Ok(timed.into_iter().map(|(_, _, e)| e).collect())
}

fn per_second(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let jobs = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(1_000_000);
    let built = Instant::now();
    let (events, last) = workload(jobs);
    let encoded: Vec<Bytes> = events.iter().map(codec::encode).collect();
    // Only the bytes are measured: free the decoded originals so the heap the fold and the
    // decoder work in is not interleaved with gigabytes of them.
    let n = events.len();
    drop(events);
    let bytes: usize = encoded.iter().map(Bytes::len).sum();
    let days = (last - START_MS) as f64 / (24 * HOUR) as f64;
    println!(
        "stream: {jobs} jobs, {} events, {:.1} MB encoded ({:.0} B/event), {days:.0} days; built in {:.1} s",
        n,
        bytes as f64 / 1e6,
        bytes as f64 / n as f64,
        built.elapsed().as_secs_f64()
    );

    if std::env::var_os("FOLD_BENCH_ONLY_APPLY").is_some() {
        // For profiling: just the decode + apply loop.
        for _ in 0..3 {
            let mut f = UsageFold::new(FoldConfig::default());
            let t = Instant::now();
            for (i, b) in encoded.iter().enumerate() {
                let event = codec::decode_event(b)?;
                black_box(f.apply(i as u64 + 1, &event));
            }
            println!(
                "decode + apply: {:.0} ns/event",
                t.elapsed().as_nanos() as f64 / n as f64
            );
        }
        return Ok(());
    }
    // Rounds alternate the two measurements and keep each one's best time: on a shared
    // machine, the minimum is the figure least disturbed by other work.
    let rounds = 5;
    let mut decode_best = Duration::MAX;
    let mut both_best = Duration::MAX;
    let mut fold = UsageFold::new(FoldConfig::default());
    for _ in 0..rounds {
        let t = Instant::now();
        for b in &encoded {
            black_box(codec::decode_event(b)?);
        }
        decode_best = decode_best.min(t.elapsed());

        let mut f = UsageFold::new(FoldConfig::default());
        let t = Instant::now();
        for (i, b) in encoded.iter().enumerate() {
            let event = codec::decode_event(b)?;
            black_box(f.apply(i as u64 + 1, &event));
        }
        both_best = both_best.min(t.elapsed());
        fold = f;
    }
    // Where the time goes: decode a batch of 1,024 events, then apply the batch, timing each
    // phase separately (the batch stays in cache, as a consumer's fetch batch would).
    let mut split_decode = Duration::MAX;
    let mut split_apply = Duration::MAX;
    for _ in 0..rounds {
        let mut f = UsageFold::new(FoldConfig::default());
        let mut batch: Vec<pb::Event> = Vec::with_capacity(1_024);
        let (mut d, mut a) = (Duration::ZERO, Duration::ZERO);
        let mut seq = 0u64;
        for chunk in encoded.chunks(1_024) {
            let t = Instant::now();
            for b in chunk {
                batch.push(codec::decode_event(b)?);
            }
            let t2 = Instant::now();
            for event in &batch {
                seq += 1;
                black_box(f.apply(seq, event));
            }
            let t3 = Instant::now();
            batch.clear();
            d += t2 - t;
            a += t3 - t2;
        }
        split_decode = split_decode.min(d);
        split_apply = split_apply.min(a);
    }
    let ns = |d: Duration| d.as_nanos() as f64 / n as f64;
    println!(
        "decode only:     {:>6.2} M events/s ({:.0} ns/event)",
        per_second(n, decode_best) / 1e6,
        ns(decode_best)
    );
    println!(
        "decode + apply:  {:>6.2} M events/s ({:.0} ns/event)   [SPEC target >= 2 M/s]",
        per_second(n, both_best) / 1e6,
        ns(both_best)
    );
    println!(
        "batched, phases timed apart: decode {:.0} ns/event, apply {:.0} ns/event ({:.2} M events/s applied)",
        ns(split_decode),
        ns(split_apply),
        per_second(n, split_apply) / 1e6
    );

    let counts = fold.counts();
    println!(
        "fold: {} changed, {} no effect, {} ignored, {} clamped; footprint {:?}",
        counts.changed,
        counts.no_effect,
        counts.ignored(),
        counts.clamped,
        fold.footprint()
    );

    // Queries must not be earlier than the cluster's last event.
    let clock = fold
        .cluster(CLUSTER)
        .and_then(|c| c.clock())
        .unwrap_or(last);
    let now = clock.max(last) + 60_000;
    let rounds = 2_000;
    let t = Instant::now();
    let mut rows = 0;
    for i in 0..rounds {
        let report = fold.window(CLUSTER, black_box(now + i))?;
        rows = report.allocations.len() + report.subtrees.len();
        black_box(report);
    }
    let window = t.elapsed() / rounds as u32;
    let report = fold.window(CLUSTER, now)?;
    println!(
        "window query: {:.1} us for {} allocations + {} subtrees ({rows} rows; capacity {} GPU-ms, unallocated {} GPU-ms)",
        window.as_secs_f64() * 1e6,
        report.allocations.len(),
        report.subtrees.len(),
        report.capacity_gpu_ms,
        report.unallocated_gpu_ms
    );

    let t = Instant::now();
    for i in 0..rounds {
        black_box(fold.account(CLUSTER, "org/prog3", black_box(now + i))?);
    }
    println!(
        "account query (subtree of 100 allocations): {:.2} us",
        (t.elapsed() / rounds as u32).as_secs_f64() * 1e6
    );

    let t = Instant::now();
    let ledger = fold.ledger(CLUSTER, now)?;
    let took = t.elapsed();
    let o = ledger.overall;
    println!(
        "ledger report: {:.1} us; {} allocations; owed delivered {:.2}% ({} / {} GPU-ms); unallocated share of delivered {:.1}%",
        took.as_secs_f64() * 1e6,
        ledger.allocations.len(),
        100.0 * o.delivered_owed_gpu_ms as f64 / o.owed_gpu_ms.max(1) as f64,
        o.delivered_owed_gpu_ms,
        o.owed_gpu_ms,
        100.0 * ledger.unallocated_delivered_gpu_ms as f64
            / (ledger.unallocated_delivered_gpu_ms + o.delivered_gpu_ms).max(1) as f64
    );
    trace_memory()
}

/// Memory after folding 7 days and all 60 days of the msft-itp trace.
fn trace_memory() -> Result<(), Box<dyn std::error::Error>> {
    let events = msft_itp()?;
    if events.is_empty() {
        println!("msft-itp trace not found: memory comparison skipped");
        return Ok(());
    }
    let mut fold = UsageFold::new(FoldConfig::default());
    let mut marks = vec![7, 14, 30];
    let last_day = events
        .last()
        .map_or(0, |e| (e.at_ms - START_MS) / (24 * HOUR));
    for (i, e) in events.iter().enumerate() {
        let day = (e.at_ms - START_MS) / (24 * HOUR);
        if marks.first().is_some_and(|&m| day >= m) {
            let m = marks.remove(0);
            report_memory(&fold, &format!("{m} days"))?;
        }
        fold.apply(i as u64 + 1, e);
    }
    report_memory(&fold, &format!("{last_day} days (all)"))?;
    Ok(())
}

fn report_memory(fold: &UsageFold, label: &str) -> Result<(), Box<dyn std::error::Error>> {
    let bytes = bincode::serialized_size(fold)?;
    let f = fold.footprint();
    println!(
        "msft-itp after {label:>14}: checkpoint {:>7.1} KB; {} curve points, {} jobs remembered, {} budget epochs, {} paths",
        bytes as f64 / 1e3,
        f.curve_points,
        f.jobs,
        f.budget_epochs,
        f.paths
    );
    Ok(())
}
