//! Submit -> placement latency over real NATS at a steady submission rate (SPEC section 6:
//! p99 <= 10 ms at 1,000 submissions/s).
//!
//! `cargo bench -p fairshare-e2e --bench placement_latency [-- --rate 1000 --seconds 10
//! --debounce-ms D]`
//!
//! One nats-server (loopback, file storage), a 1,024-GPU cluster (128 nodes x 8) with four
//! allocations, and in-process the whole system with its defaults: the submission,
//! accounting, decision (`--debounce-ms` sets its debounce) and preemption services, and the
//! demo launcher's runner, which confirms each placement and ends the job 0.1 s later, so GPUs
//! keep coming free and jobs wait for the decision, not for capacity (the bench prints the
//! most GPUs held at once to show it).
//!
//! Submissions are sent open-loop at `rate` per second (each on schedule, whether or not
//! earlier ones were answered, so a slow moment shows in the latencies instead of slowing the
//! sender down). A job's latency runs from sending its submit request to a follower of the log
//! seeing its `JobPlaced`: it covers the request, the submission service's append, the
//! decision service's fold and cycle, the placement's append and its delivery to a reader.
//! The first second is warm-up and left out of the figures.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairshare_decision::shell as decision;
use fairshare_e2e::{
    BIG, BIG_ALLOCATIONS as ALLOCATIONS, BIG_BUDGET, BIG_INVENTORY, bench_arg, spawn_until_stopped,
};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_launcher::runner::{self, RunnerConfig};
use fairshare_launcher::submit::{Retry, submit};
use fairshare_model::files;
use fairshare_runtime::admin;
use fairshare_runtime::clock::{Clock, SystemClock};
use fairshare_runtime::log::Follower;
use fairshare_testkit::NatsServer;

/// The launcher runs job time this many times faster: a job's 120 s take 0.1 s.
const TIME_SCALE: u32 = 1_200;

struct Options {
    rate: u32,
    seconds: u32,
    debounce: Option<Duration>,
}

fn options() -> Options {
    Options {
        rate: bench_arg("--rate").unwrap_or(1_000u32).max(1),
        seconds: bench_arg("--seconds").unwrap_or(10u32).max(2),
        debounce: bench_arg("--debounce-ms").map(Duration::from_millis),
    }
}

fn request(i: u64) -> pb::SubmitRequest {
    pb::SubmitRequest {
        idempotency_key: format!("latency-{i}"),
        spec: Some(pb::JobSpec {
            cluster: BIG.into(),
            allocation: ALLOCATIONS[(i % 4) as usize].into(),
            user: "ada".into(),
            gpus: [1, 1, 1, 2, 4][(i % 5) as usize],
            nodes: 0,
            min_runtime_s: 900,
            resumable: true,
            priority: 0,
            time_limit_s: 0,
            payload: "sleep 120".into(),
            name: format!("job-{i}"),
        }),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = options();
    let _telemetry = fairshare_runtime::telemetry::init("placement-latency-bench");
    let server = NatsServer::start()?;
    let client = async_nats::connect(server.url()).await?;
    let js = async_nats::jetstream::new(client.clone());
    fairshare_runtime::nats::ensure_streams(&js, 1).await?;
    let now = SystemClock.now_ms();
    admin::set_budget(&js, now, files::parse_budget(BIG_BUDGET)?).await?;
    admin::register_nodes(
        &js,
        now,
        files::parse_inventory(BIG_INVENTORY)?.registrations(),
    )
    .await?;

    let submission = fairshare_submission::shell::Service::start(
        async_nats::connect(server.url()).await?,
        fairshare_submission::Config::default(),
        Arc::new(SystemClock),
    )
    .await?;
    let (stop_submission, submission_task) = spawn_until_stopped(|s| submission.serve(s));

    let mut decision_config = decision::Config::new(BIG);
    if let Some(d) = o.debounce {
        decision_config.debounce = d;
    }
    let debounce = decision_config.debounce;
    let decision = decision::Service::start(
        async_nats::connect(server.url()).await?,
        decision_config,
        Arc::new(SystemClock),
    )
    .await?;
    let (stop_decision, decision_task) = spawn_until_stopped(|s| decision.serve(s));

    // Not on the measured path, but they follow the same log on the same cores.
    let preemption = fairshare_preemption::shell::Service::start(
        async_nats::connect(server.url()).await?,
        fairshare_preemption::shell::Config::new(BIG),
        Arc::new(SystemClock),
    )
    .await?;
    let (stop_preemption, preemption_task) = spawn_until_stopped(|s| preemption.serve(s));
    let accounting_dir = tempfile::tempdir()?;
    let accounting = fairshare_accounting::shell::Service::start(
        async_nats::connect(server.url()).await?,
        fairshare_accounting::shell::Config {
            cluster: Some(BIG.to_owned()),
            ..fairshare_accounting::shell::Config::new(accounting_dir.path().to_path_buf())
        },
        Arc::new(SystemClock),
    )
    .await?;
    let (stop_accounting, accounting_task) = spawn_until_stopped(|s| accounting.serve(s));

    let runner_client = async_nats::connect(server.url()).await?;
    let runner_config = RunnerConfig {
        cluster: BIG.into(),
        time_scale: TIME_SCALE,
        default_duration: Duration::from_secs(120),
        honour_preemption: true,
        tick: Duration::from_millis(10),
    };
    let (stop_runner, runner_task) = spawn_until_stopped(|s| {
        runner::run(runner_client, runner_config, Arc::new(SystemClock), s)
    });

    // When each job's submission and placement were seen, by job id.
    let placed: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let logged: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut follower = Follower::start(&js, 1, vec![subjects::cluster_events(BIG)]).await?;
    let (seen_placed, seen_logged) = (placed.clone(), logged.clone());
    // The most GPUs held at once: well under the cluster's 1,024, or jobs waited for
    // capacity and the figures would not be the decision's latency.
    let peak_held = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let peak = peak_held.clone();
    let watcher = tokio::spawn(async move {
        let mut holding: HashMap<String, u32> = HashMap::new();
        let mut held = 0u32;
        while let Some(Ok(entry)) = follower.next().await {
            let at = Instant::now();
            let Ok(pb::Event {
                body: Some(body), ..
            }) = entry.event
            else {
                continue;
            };
            let (seen, job_id) = match body {
                Body::JobPlaced(p) => {
                    let gpus = p.nodes.iter().map(|n| n.gpus).sum();
                    held = held.saturating_add(gpus);
                    peak.fetch_max(held, std::sync::atomic::Ordering::Relaxed);
                    holding.insert(p.job_id.clone(), gpus);
                    (&seen_placed, p.job_id)
                }
                Body::JobSubmitted(s) => (&seen_logged, s.job_id),
                Body::JobFinished(f) => {
                    held = held.saturating_sub(holding.remove(&f.job_id).unwrap_or(0));
                    continue;
                }
                _ => continue,
            };
            if let Ok(mut seen) = seen.lock() {
                seen.insert(job_id, at);
            }
        }
    });

    println!(
        "submit -> placement: {} submissions/s for {} s, 1,024 GPUs (128 x 8), decision debounce {:?}",
        o.rate, o.seconds, debounce
    );
    let total = u64::from(o.rate) * u64::from(o.seconds);
    let warm_up = u64::from(o.rate);
    let interval = Duration::from_secs(1) / o.rate;
    // Job id, when its request was sent, and when its answer came, per submission.
    let (answers_tx, mut answers) = tokio::sync::mpsc::unbounded_channel();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for i in 0..total {
        ticker.tick().await;
        let client = client.clone();
        let tx = answers_tx.clone();
        tokio::spawn(async move {
            let sent = Instant::now();
            let reply = submit(&client, &request(i), Retry::default()).await;
            let answered = Instant::now();
            let _ = tx.send((i, reply, sent, answered));
        });
    }
    drop(answers_tx);
    let sending = started.elapsed();
    let mut sent_at: HashMap<String, (u64, Instant, Duration)> = HashMap::new();
    let mut failed = 0;
    while let Some((i, reply, sent, answered)) = answers.recv().await {
        match reply.map(|r| r.result) {
            Ok(Some(pb::submit_reply::Result::Accepted(a))) => {
                sent_at.insert(a.job_id, (i, sent, answered - sent));
            }
            _ => failed += 1,
        }
    }
    // Wait for the last placements (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = placed
            .lock()
            .map(|p| sent_at.keys().all(|id| p.contains_key(id)))
            .unwrap_or(false);
        if all || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let placed = placed.lock().map(|p| p.clone()).unwrap_or_default();
    let logged = logged.lock().map(|p| p.clone()).unwrap_or_default();

    let mut latencies = Vec::new();
    let mut answers_in = Vec::new();
    let mut decided_in = Vec::new();
    let mut unplaced = 0;
    for (id, (i, sent, answer)) in &sent_at {
        if *i < warm_up {
            continue;
        }
        answers_in.push(*answer);
        match placed.get(id) {
            Some(at) => {
                latencies.push(at.saturating_duration_since(*sent));
                if let Some(seen) = logged.get(id) {
                    decided_in.push(at.saturating_duration_since(*seen));
                }
            }
            None => unplaced += 1,
        }
    }
    latencies.sort();
    answers_in.sort();
    decided_in.sort();
    println!(
        "  sent {total} in {:.2} s ({:.0}/s); {failed} not accepted; {} measured after 1 s of warm-up, {unplaced} never placed",
        sending.as_secs_f64(),
        total as f64 / sending.as_secs_f64(),
        latencies.len() + unplaced,
    );
    println!(
        "  at most {} of 1,024 GPUs held at once",
        peak_held.load(std::sync::atomic::Ordering::Relaxed)
    );
    for (name, v) in [
        ("submit -> placement", &latencies),
        ("submit -> job id   ", &answers_in),
        ("logged -> placement", &decided_in),
    ] {
        println!(
            "  {name}  p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
            ms(percentile(v, 50.0)),
            ms(percentile(v, 90.0)),
            ms(percentile(v, 99.0)),
            ms(v.last().copied().unwrap_or_default()),
        );
    }

    let _ = stop_runner.send(());
    let _ = stop_decision.send(());
    let _ = stop_preemption.send(());
    let _ = stop_accounting.send(());
    let _ = stop_submission.send(());
    runner_task.await??;
    decision_task.await??;
    preemption_task.await??;
    accounting_task.await??;
    submission_task.await??;
    watcher.abort();
    Ok(())
}
