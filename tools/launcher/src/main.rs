//! `fairshare-demo-launcher`: acts on its cluster's placements (starts, finishes after the job's
//! duration) and optionally submits a trace as workload. See `--help`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fairshare_events::pb;
use fairshare_launcher::{runner, submit, workload};
use fairshare_model::duration::parse_duration;
use fairshare_runtime::cli::NatsArgs;
use fairshare_runtime::{clock::SystemClock, shutdown, telemetry};

/// Demo launcher for a simulated cluster.
///
/// Follows `fairshare.events.<cluster>.job.>`: confirms each placement with `job_started`,
/// reports `job_finished` once the job's payload duration (`sleep <s>`) has passed in job time,
/// and confirms preemption orders. With `--trace` it also submits the trace's jobs.
#[derive(Debug, Clone, Parser)]
#[command(version, about, long_about)]
struct Args {
    #[command(flatten)]
    nats: NatsArgs,
    /// The cluster this launcher runs jobs on.
    #[arg(long, env = "FAIRSHARE_CLUSTER", default_value = "demo")]
    cluster: String,
    /// Job time runs this many times faster than the clock.
    #[arg(long, default_value_t = 60)]
    time_scale: u32,
    /// Run time of jobs whose payload names none.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    default_duration: Duration,
    /// Do not confirm preemption orders (to watch grace deadlines expire).
    #[arg(long)]
    ignore_preemption: bool,
    /// Submit the jobs of this replay.csv trace, at the time scale.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Allocations trace tenants are spread over (comma-separated leaf paths).
    #[arg(long, value_delimiter = ',')]
    allocations: Vec<String>,
    /// Submit at most this many trace jobs.
    #[arg(long, default_value_t = 200)]
    max_jobs: usize,
    /// Trace arrivals come this many times faster than the clock (default: `--time-scale`).
    /// Faster than the jobs run, the trace's demand piles up sooner: the demo uses 600 with a
    /// time scale of 60, so the first hours of the trace arrive in a minute or two and the
    /// cluster is contended while they run.
    #[arg(long)]
    arrival_scale: Option<u32>,
    /// Names this run in the trace jobs' idempotency keys (`demo-<run>-<trace id>`): a
    /// launcher restarted with the same name submits nothing twice, one given a new name
    /// submits the trace afresh (`deploy/start.sh` names each start by its time).
    #[arg(long, default_value = "trace")]
    run: String,
}

async fn submit_trace(
    client: async_nats::Client,
    args: &Args,
    path: &PathBuf,
) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let jobs = workload::parse_replay(&text)?;
    let start = tokio::time::Instant::now();
    let first = jobs.first().map_or(0, |j| j.submit_s);
    let mut per_tenant = std::collections::HashMap::<String, u64>::new();
    let mut sent = 0;
    for job in &jobs {
        if sent >= args.max_jobs {
            break;
        }
        let n = per_tenant.entry(job.tenant.clone()).or_default();
        let Some(request) = workload::to_request(
            job,
            *n,
            &args.cluster,
            &args.allocations,
            &format!("demo-{}-", args.run),
            args.time_scale,
        ) else {
            continue;
        };
        *n += 1;
        let offset = workload::arrival_offset(
            job.submit_s - first,
            args.arrival_scale.unwrap_or(args.time_scale),
        );
        tokio::time::sleep_until(start + offset).await;
        // Sent again with the same key until it is answered (the key keeps a submission that
        // did land from landing twice): a submission service down for longer than one
        // submission's retries delays the trace, and loses none of it.
        let reply = loop {
            match submit::submit(&client, &request, submit::Retry::default()).await {
                Ok(reply) => break reply,
                Err(e) => {
                    tracing::warn!(trace_id = job.id, "not submitted yet, trying again: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        match reply.result {
            Some(pb::submit_reply::Result::Accepted(a)) => {
                tracing::info!(job_id = a.job_id, trace_id = job.id, "submitted")
            }
            Some(pb::submit_reply::Result::Rejected(r)) => {
                tracing::warn!(trace_id = job.id, "rejected: {}", r.message)
            }
            None => tracing::warn!("empty submit reply"),
        }
        sent += 1;
    }
    tracing::info!(sent, "trace submitted");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        fairshare_events::subjects::is_valid_token(&args.cluster),
        "--cluster {:?} is not a cluster name (letters, digits, _ and -, starting with a letter \
         or digit): it would follow no cluster's events, or several",
        args.cluster
    );
    let _telemetry = telemetry::init("fairshare-demo-launcher");
    let client = args.nats.connect("fairshare-demo-launcher").await?;
    if let Some(path) = args.trace.clone() {
        anyhow::ensure!(!args.allocations.is_empty(), "--trace needs --allocations");
        let client = client.clone();
        let args_for_trace = args.clone();
        tokio::spawn(async move {
            if let Err(e) = submit_trace(client, &args_for_trace, &path).await {
                tracing::error!("trace submission stopped: {e:#}");
            }
        });
    }
    let config = runner::RunnerConfig {
        cluster: args.cluster,
        time_scale: args.time_scale,
        default_duration: args.default_duration,
        honour_preemption: !args.ignore_preemption,
        tick: Duration::from_millis(100),
    };
    runner::run(client, config, Arc::new(SystemClock), shutdown::signal()).await?;
    Ok(())
}
