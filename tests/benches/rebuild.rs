//! Rebuilding the accounting fold from JetStream against a bare read of the same stream, in one
//! run: the fold must cost little on top of reading the log (goal: >= 70% of the bare rate).
//!
//! `cargo bench -p fairshare-e2e --bench rebuild [-- --jobs N --rounds R]`
//!
//! Both sides read the same messages through an ordered consumer with the accounting filters;
//! the bare side only counts them, the rebuild side decodes every one and applies it to a
//! `UsageFold`. Rounds alternate the two sides.

use std::time::Instant;

use async_nats::jetstream::{self, consumer};
use fairshare_accounting::domain::{FoldConfig, UsageFold};
use fairshare_accounting::shell::log_filters;
use fairshare_e2e::{CLUSTER, Stack, bench_arg};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::{codec, subjects};
use fairshare_runtime::log::Follower;
use futures::StreamExt;

/// Publishes `jobs` job lifecycles (submitted, started, finished), pipelined.
async fn fill(js: &jetstream::Context, jobs: usize, base: i64) -> anyhow::Result<usize> {
    let allocations = ["research/nlp", "research/vision", "infra"];
    let mut pending = Vec::with_capacity(4096);
    let mut count = 0;
    for i in 0..jobs {
        let job = format!("{i:08}");
        let t = base + i as i64 * 1_000;
        let gpus = 1 + (i % 8) as u32;
        let bodies = [
            (
                "job_submitted",
                t,
                Body::JobSubmitted(pb::JobSubmitted {
                    job_id: job.clone(),
                    idempotency_key: job.clone(),
                    spec: Some(pb::JobSpec {
                        cluster: CLUSTER.into(),
                        allocation: allocations[i % 3].into(),
                        gpus: i64::from(gpus),
                        min_runtime_s: if i % 5 == 0 { 0 } else { 900 },
                        ..Default::default()
                    }),
                    shape: Some(pb::Shape {
                        nodes: 1,
                        gpus_per_node: gpus,
                    }),
                }),
            ),
            (
                "job_placed",
                t + 500,
                fairshare_testkit::events::placed_on(&job, "gpu000", gpus),
            ),
            (
                "job_started",
                t + 500,
                Body::JobStarted(pb::JobStarted {
                    job_id: job.clone(),
                }),
            ),
            (
                "job_finished",
                t + 3_600_000,
                Body::JobFinished(pb::JobFinished {
                    job_id: job.clone(),
                    exit_code: 0,
                }),
            ),
        ];
        for (kind, at, body) in bodies {
            let event = pb::Event {
                at_ms: at,
                body: Some(body),
            };
            pending.push(
                js.publish(
                    subjects::job_event(CLUSTER, &job, kind),
                    codec::encode(&event),
                )
                .await?,
            );
            count += 1;
            if pending.len() == 4096 {
                for ack in pending.drain(..) {
                    ack.await?;
                }
            }
        }
    }
    for ack in pending {
        ack.await?;
    }
    Ok(count)
}

async fn bare_read(js: &jetstream::Context) -> anyhow::Result<(usize, f64)> {
    let stream = js.get_stream(EVENTS_STREAM).await?;
    let start = Instant::now();
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subjects: log_filters(None),
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    let mut n = 0;
    let mut bytes = 0;
    while let Some(m) = messages.next().await {
        let m = m?;
        n += 1;
        bytes += m.payload.len();
        if m.info().map_err(|e| anyhow::anyhow!("{e}"))?.pending == 0 {
            break;
        }
    }
    std::hint::black_box(bytes);
    Ok((n, start.elapsed().as_secs_f64()))
}

async fn rebuild(js: &jetstream::Context) -> anyhow::Result<(usize, f64, UsageFold)> {
    let start = Instant::now();
    let mut fold = UsageFold::new(FoldConfig::default());
    let mut follower = Follower::start(js, 1, log_filters(None)).await?;
    let n = follower
        .catch_up(|entry| {
            match &entry.event {
                Ok(event) => fold.apply(entry.sequence, event),
                Err(_) => fold.apply(entry.sequence, &pb::Event::default()),
            };
        })
        .await?;
    Ok((n as usize, start.elapsed().as_secs_f64(), fold))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let jobs = bench_arg("--jobs").unwrap_or(100_000);
    let rounds = bench_arg("--rounds").unwrap_or(3);
    let stack = Stack::start().await?;
    let base = 1_900_000_000_000;
    let t = Instant::now();
    let published = fill(&stack.js, jobs, base).await?;
    println!(
        "rebuild: {published} job events ({jobs} jobs) published in {:.1} s; {rounds} rounds",
        t.elapsed().as_secs_f64()
    );
    let (mut bare, mut folded) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_bare in order {
            if is_bare {
                let (n, secs) = bare_read(&stack.js).await?;
                bare.push(n as f64 / secs);
                println!(
                    "  round {round}: bare read    {n} messages in {secs:.3} s = {:>9.0} msg/s",
                    n as f64 / secs
                );
            } else {
                let (n, secs, fold) = rebuild(&stack.js).await?;
                folded.push(n as f64 / secs);
                println!(
                    "  round {round}: rebuild fold {n} messages in {secs:.3} s = {:>9.0} msg/s (last applied {})",
                    n as f64 / secs,
                    fold.last_applied()
                );
            }
        }
    }
    bare.sort_by(f64::total_cmp);
    folded.sort_by(f64::total_cmp);
    let (b, f) = (bare[bare.len() / 2], folded[folded.len() / 2]);
    println!(
        "median: bare {b:.0} msg/s, rebuild {f:.0} msg/s, ratio {:.1}% (goal >= 70%)",
        100.0 * f / b
    );
    Ok(())
}
