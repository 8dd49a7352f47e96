//! `fairshare-accounting`: folds the event log into exact sliding-window usage and the
//! owed/delivered ledger, publishes usage snapshots, answers usage queries.
//! See `fairshare-accounting --help`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use fairshare_accounting::domain::FoldConfig;
use fairshare_accounting::shell::{self, Config};
use fairshare_model::duration::parse_duration;
use fairshare_runtime::cli::{NatsArgs, UsageWindowArgs};
use fairshare_runtime::{clock::SystemClock, shutdown, telemetry};

/// The fairshare accounting service.
///
/// Folds job lifecycle, budget tree and inventory events into per-allocation usage over the
/// sliding window, keeps a sled checkpoint of its state (delete it at any time: it is rebuilt
/// from the log), publishes `UsageSnapshot` events on `fairshare.events.<cluster>.usage`, and
/// answers `fairshare.api.usage.<cluster>` queries. Every flag can also be set with the
/// environment variable named in brackets.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Args {
    #[command(flatten)]
    nats: NatsArgs,
    #[command(flatten)]
    usage_window: UsageWindowArgs,
    /// Directory of the sled checkpoint.
    #[arg(
        long,
        env = "FAIRSHARE_ACCOUNTING_CHECKPOINT",
        default_value = ".run/accounting"
    )]
    checkpoint_dir: PathBuf,
    /// Checkpoint after this many events...
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_EVENTS", default_value_t = 10_000)]
    checkpoint_events: u64,
    /// ...or after this long, whichever comes first.
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_EVERY", default_value = "5s", value_parser = parse_duration)]
    checkpoint_every: std::time::Duration,
    /// Snapshot cadence: each cluster with events folded since its last snapshot publishes a new
    /// one; a cluster with none, at most once a minute (its running jobs keep charging).
    #[arg(long, env = "FAIRSHARE_SNAPSHOT_EVERY", default_value = "10s", value_parser = parse_duration)]
    snapshot_every: std::time::Duration,
    /// Fold only this cluster (run one instance per cluster); default: every cluster.
    #[arg(long, env = "FAIRSHARE_CLUSTER")]
    cluster: Option<String>,
    /// Replicas for streams this service creates: 1 on one server, 3 on a 3-node cluster.
    #[arg(long, env = "FAIRSHARE_STREAM_REPLICAS", default_value_t = 1)]
    stream_replicas: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = telemetry::init("fairshare-accounting");
    let window_ms = u64::try_from(args.usage_window.window_ms()?).context("--window")?;
    let config = Config {
        fold: FoldConfig::new(window_ms)?,
        checkpoint_every_events: args.checkpoint_events.max(1),
        checkpoint_every: args
            .checkpoint_every
            .max(std::time::Duration::from_millis(100)),
        snapshot_every: args
            .snapshot_every
            .max(std::time::Duration::from_millis(100)),
        cluster: args.cluster,
        stream_replicas: args.stream_replicas,
        ..Config::new(args.checkpoint_dir)
    };
    let client = args
        .nats
        .connect_as(
            "fairshare-accounting",
            fairshare_runtime::auth::Role::Accounting,
        )
        .await?;
    shell::run(client, config, Arc::new(SystemClock), shutdown::signal()).await?;
    Ok(())
}
