//! `fairshare-decision`: the fair-share decision service of one GPU cluster. See
//! `fairshare-decision --help`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fairshare_decision::shell::{self, Config, audit_log};
use fairshare_model::duration::parse_duration;
use fairshare_runtime::cli::{NatsArgs, UsageWindowArgs};
use fairshare_runtime::{clock::SystemClock, shutdown, telemetry};

/// The fairshare decision service of one GPU cluster.
///
/// Folds `fairshare.events.<cluster>.>` (jobs, budget tree, nodes, maintenance, usage
/// snapshots), runs a decision cycle on every change (at most one per debounce) and on a
/// timer, and appends a `JobPlaced` per placement. Keeps a sled checkpoint of its fold
/// (delete it at any time: the next start rebuilds it from the log). One instance per
/// cluster decides, holding the cluster's lease; a second stands by and takes over when the
/// lease is let go or runs out (`fairshare leases`). Every flag can also be set with the environment variable named in brackets.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Args {
    #[command(flatten)]
    nats: NatsArgs,
    /// The GPU cluster this instance decides for.
    #[arg(long, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
    /// Least time between the starts of two cycles that changes trigger (e.g. 2ms, 20ms);
    /// a change after a quiet spell is decided at once. Longer batches more changes per
    /// cycle, at the cost of each submission's wait.
    #[arg(long, env = "FAIRSHARE_DEBOUNCE", default_value = "2ms", value_parser = parse_duration)]
    debounce: Duration,
    /// A cycle runs at least this often, changes or not (e.g. 5s, 1m).
    #[arg(long, env = "FAIRSHARE_CYCLE_EVERY", default_value = "5s", value_parser = parse_duration)]
    cycle_every: Duration,
    /// Replicas for streams this service creates: 1 on one server, 3 on a 3-node cluster.
    #[arg(long, env = "FAIRSHARE_STREAM_REPLICAS", default_value_t = 1)]
    stream_replicas: usize,
    /// Directory of the sled checkpoint (the fold and the last sequence applied). Only a
    /// cache: deleting it makes the next start fold the whole log. Defaults to
    /// `.run/decision-<cluster>`.
    #[arg(long, env = "FAIRSHARE_DECISION_CHECKPOINT")]
    checkpoint_dir: Option<PathBuf>,
    /// Checkpoint after this many log entries...
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_EVENTS", default_value_t = 10_000)]
    checkpoint_events: u64,
    /// ...or this long after the last checkpoint (e.g. 5s), whichever comes first.
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_EVERY", default_value = "5s", value_parser = parse_duration)]
    checkpoint_every: Duration,
    #[command(flatten)]
    usage_window: UsageWindowArgs,
    /// Do not serve: re-derive every placement in the cluster's log, print the divergences
    /// and exit (status 1 if any).
    #[arg(long)]
    audit: bool,
    /// With `--audit`: hold only placements from this sequence on to this build and these
    /// flags (say, from where they were last changed); earlier findings are counted, not
    /// failed.
    #[arg(long, default_value_t = 1, requires = "audit")]
    audit_from: u64,
}

/// `20ms`, or anything [`parse_duration`] takes (`5s`, `1m`, a bare number of seconds).
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = telemetry::init("fairshare-decision");
    anyhow::ensure!(!args.cycle_every.is_zero(), "--cycle-every must be above 0");
    let usage_window_ms = Some(args.usage_window.window_ms()?);
    let client = args
        .nats
        .connect_as(
            "fairshare-decision",
            fairshare_runtime::auth::Role::Decision,
        )
        .await?;
    if args.audit {
        let js = async_nats::jetstream::new(client);
        let mut report = audit_log(&js, &args.cluster)
            .await
            .with_context(|| format!("cannot read the log of cluster {}", args.cluster))?;
        report.keep_from(args.audit_from);
        fairshare_runtime::out!("{}", report.render(&args.cluster));
        anyhow::ensure!(
            report.is_clean(),
            "the audit found divergences or over-committed nodes"
        );
        return Ok(());
    }
    let checkpoint_dir = args
        .checkpoint_dir
        .unwrap_or_else(|| PathBuf::from(format!(".run/decision-{}", args.cluster)));
    let config = Config {
        cluster: args.cluster,
        debounce: args.debounce,
        cycle_every: args.cycle_every,
        stream_replicas: args.stream_replicas,
        checkpoint_dir: Some(checkpoint_dir),
        checkpoint_every_events: args.checkpoint_events.max(1),
        checkpoint_every: args.checkpoint_every.max(Duration::from_millis(100)),
        usage_window_ms,
    };
    shell::run(client, config, Arc::new(SystemClock), shutdown::signal()).await?;
    Ok(())
}
