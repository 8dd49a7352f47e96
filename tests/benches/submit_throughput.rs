//! Submission throughput over real NATS (loopback, file storage), against the bare JetStream
//! publish rate for messages of the same size, measured in one run.
//!
//! `cargo bench -p fairshare-e2e --bench submit_throughput [-- --submissions N --concurrency C]`
//!
//! Both sides run with the same number of concurrent senders, each waiting for its answer
//! before sending again (a launcher waits for its job id; a bare publisher waits for its
//! stream ack). Rounds alternate the two sides so drift on a noisy machine hits both.

use std::sync::Arc;
use std::time::Instant;

use async_nats::jetstream::{self, stream};
use fairshare_e2e::{Stack, accepted, bench_arg, request};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, headers, subjects};
use fairshare_submission::Config;

struct Options {
    submissions: usize,
    concurrency: usize,
    rounds: usize,
}

fn options() -> Options {
    Options {
        submissions: bench_arg("--submissions").unwrap_or(20_000),
        concurrency: bench_arg("--concurrency").unwrap_or(64),
        rounds: bench_arg("--rounds").unwrap_or(3),
    }
}

/// CPU seconds (user + system) a process has used, from /proc (Linux only; 0 elsewhere).
fn cpu_seconds(pid: Option<u32>) -> f64 {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may contain spaces).
    let Some(rest) = stat.rsplit(')').next() else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
    ticks / 100.0
}

/// Runs `round` and reports its rate with the CPU microseconds per message spent by the
/// nats-server and by this process (clients plus, for the service side, the service).
async fn measured<F: std::future::Future<Output = f64>>(
    server_pid: Option<u32>,
    n: usize,
    round: F,
) -> (f64, f64, f64) {
    let (s0, p0) = (cpu_seconds(server_pid), cpu_seconds(None));
    let rate = round.await;
    let (s1, p1) = (cpu_seconds(server_pid), cpu_seconds(None));
    (rate, (s1 - s0) * 1e6 / n as f64, (p1 - p0) * 1e6 / n as f64)
}

async fn submit_round(stack: &Arc<Stack>, round: usize, o: &Options) -> f64 {
    let per_task = o.submissions / o.concurrency;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..o.concurrency {
        let stack = stack.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_task {
                let reply = stack
                    .submit(&request(&format!("r{round}-t{t}-{i}")))
                    .await
                    .expect("reply");
                accepted(&reply).expect("accepted");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    (per_task * o.concurrency) as f64 / start.elapsed().as_secs_f64()
}

async fn bare_round(
    js: &jetstream::Context,
    payload: bytes::Bytes,
    round: usize,
    o: &Options,
) -> f64 {
    let per_task = o.submissions / o.concurrency;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..o.concurrency {
        let js = js.clone();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_task {
                let mut h = async_nats::HeaderMap::new();
                h.insert(
                    headers::MESSAGE_ID,
                    format!("submit:b{round}-t{t}-{i}").as_str(),
                );
                js.publish_with_headers(format!("bench.bare.{t}"), h, payload.clone())
                    .await
                    .expect("publish")
                    .await
                    .expect("ack");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    (per_task * o.concurrency) as f64 / start.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = options();
    let mut stack = Stack::start().await?;
    stack.start_submission(Config::default()).await?;
    let stack = Arc::new(stack);

    // A bare stream configured like the events stream (file storage, same duplicate window).
    let js = stack.js.clone();
    js.create_stream(stream::Config {
        name: "BENCH_BARE".into(),
        subjects: vec!["bench.bare.>".into()],
        storage: stream::StorageType::File,
        duplicate_window: fairshare_events::streams::DUPLICATE_WINDOW,
        ..Default::default()
    })
    .await?;
    // Same size as what the service appends per submission.
    let sample = pb::Event {
        at_ms: 1_764_000_000_000,
        body: Some(Body::JobSubmitted(
            fairshare_submission::domain::job_submitted(
                "0190b6a4-9f3e-7c3a-8d6e-123456789abc",
                &request("r0-t0-0"),
                fairshare_model::shape::Shape {
                    nodes: 1,
                    gpus_per_node: 1,
                },
            ),
        )),
    };
    let payload = codec::encode(&sample);
    println!(
        "submit_throughput: {} submissions x {} rounds, {} concurrent senders, event {} bytes, request {} bytes",
        o.submissions,
        o.rounds,
        o.concurrency,
        payload.len(),
        codec::encode(&request("r0-t0-0")).len()
    );
    // Warm-up: connections, stream files, the service's first allocations.
    let warm = Options {
        submissions: 2_000,
        rounds: 1,
        concurrency: o.concurrency,
    };
    submit_round(&stack, 1000, &warm).await;
    bare_round(&js, payload.clone(), 1000, &warm).await;

    let (mut service, mut bare) = (Vec::new(), Vec::new());
    let pid = stack.server.pid();
    let n = o.submissions;
    for round in 0..o.rounds {
        let (s, b) = if round % 2 == 0 {
            let s = measured(pid, n, submit_round(&stack, round, &o)).await;
            (
                s,
                measured(pid, n, bare_round(&js, payload.clone(), round, &o)).await,
            )
        } else {
            let b = measured(pid, n, bare_round(&js, payload.clone(), round, &o)).await;
            (measured(pid, n, submit_round(&stack, round, &o)).await, b)
        };
        service.push(s.0);
        bare.push(b.0);
        println!(
            "  round {round}: service {:>8.0} accepted/s (CPU/msg: server {:>5.1} us, service+clients {:>5.1} us)   bare {:>8.0} publishes/s (server {:>5.1} us, clients {:>5.1} us)   ratio {:.1}%",
            s.0,
            s.1,
            s.2,
            b.0,
            b.1,
            b.2,
            100.0 * s.0 / b.0
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (s, b) = (median(&mut service), median(&mut bare));
    println!(
        "median: service {s:.0} accepted/s, bare {b:.0} publishes/s, ratio {:.1}% (goal >= 50%)",
        100.0 * s / b
    );
    // Every accepted submission is one event: nothing was written twice.
    // Only job-submitted events exist on job subjects in this run.
    let follower =
        fairshare_runtime::log::Follower::start(&js, 1, vec![subjects::job_kind("job_submitted")])
            .await?;
    let submitted = follower.pending_at_start as usize;
    let expected = warm.submissions / warm.concurrency * warm.concurrency
        + o.rounds * (o.submissions / o.concurrency * o.concurrency);
    println!("events check: {submitted} job_submitted events for {expected} submissions");
    anyhow::ensure!(submitted == expected, "event count mismatch");
    Ok(())
}
