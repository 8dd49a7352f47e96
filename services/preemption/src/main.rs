//! `fairshare-preemption`: the preemption service of one GPU cluster. See
//! `fairshare-preemption --help`.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use fairshare_model::duration::parse_duration;
use fairshare_preemption::domain;
use fairshare_preemption::shell::{self, Config};
use fairshare_runtime::cli::NatsArgs;
use fairshare_runtime::{clock::SystemClock, shutdown, telemetry};

/// The fairshare preemption service of one GPU cluster.
///
/// Folds `fairshare.events.<cluster>.>`, orders victims off for waiting under-served work
/// (never inside their minimum runtime), kills at the grace deadline what the launcher did not
/// confirm, requeues resumable jobs and drains cordoned nodes. Keeps no checkpoint yet: every
/// start replays the cluster's log. Run exactly one per cluster. Every flag can also be set
/// with the environment variable named in brackets.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Args {
    #[command(flatten)]
    nats: NatsArgs,
    /// The GPU cluster this instance preempts for.
    #[arg(long, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
    /// Time between a preemption order and the moment the job counts as killed (e.g. 30s).
    #[arg(long, env = "FAIRSHARE_GRACE", default_value = "30s", value_parser = parse_duration)]
    grace: Duration,
    /// Longest minimum runtime honoured (e.g. 8h).
    #[arg(long, env = "FAIRSHARE_MAX_MIN_RUNTIME", default_value = "8h", value_parser = parse_duration)]
    max_min_runtime: Duration,
    /// Jobs are assumed to checkpoint this often; work since then is lost on preemption.
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_INTERVAL", default_value = "30m", value_parser = parse_duration)]
    checkpoint_interval: Duration,
    /// Hysteresis in per mille: how much worse the victim's side must rank than the waiter's
    /// after the waiter is charged.
    #[arg(long, env = "FAIRSHARE_HYSTERESIS_PER_MILLE", default_value_t = 100)]
    hysteresis_per_mille: u32,
    /// Replicas for streams this service creates: 1 on one server, 3 on a 3-node cluster.
    #[arg(long, env = "FAIRSHARE_STREAM_REPLICAS", default_value_t = 1)]
    stream_replicas: usize,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    telemetry::init("fairshare-preemption");
    let policy = domain::Config {
        grace_ms: millis(args.grace),
        min_runtime_cap_ms: millis(args.max_min_runtime),
        checkpoint_interval_ms: millis(args.checkpoint_interval),
        hysteresis_permille: args.hysteresis_per_mille,
        ..domain::Config::default()
    };
    policy.validate()?;
    let client = args.nats.connect("fairshare-preemption").await?;
    let config = Config {
        policy,
        stream_replicas: args.stream_replicas,
        ..Config::new(args.cluster)
    };
    shell::run(client, config, Arc::new(SystemClock), shutdown::signal()).await?;
    Ok(())
}
