//! `fairshare-preemption`: the preemption service of one GPU cluster. See
//! `fairshare-preemption --help`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fairshare_model::duration::parse_duration;
use fairshare_preemption::cli::PolicyArgs;
use fairshare_preemption::shell::{self, Config};
use fairshare_runtime::cli::{NatsArgs, UsageWindowArgs};
use fairshare_runtime::{clock::SystemClock, shutdown, telemetry};

/// The fairshare preemption service of one GPU cluster.
///
/// Folds `fairshare.events.<cluster>.>`, orders victims off for waiting under-served work
/// (never inside their minimum runtime), kills at the grace deadline what the launcher did not
/// confirm, requeues resumable jobs and drains cordoned nodes. Keeps a sled checkpoint of its
/// fold (delete it at any time: the next start rebuilds it from the log). One instance per
/// cluster orders, holding the cluster's lease; a second stands by and takes over when the
/// lease is let go or runs out (`fairshare leases`). Every flag can also be set with the environment variable named in brackets.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Args {
    #[command(flatten)]
    nats: NatsArgs,
    /// The GPU cluster this instance preempts for.
    #[arg(long, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    usage_window: UsageWindowArgs,
    /// Replicas for streams this service creates: 1 on one server, 3 on a 3-node cluster.
    #[arg(long, env = "FAIRSHARE_STREAM_REPLICAS", default_value_t = 1)]
    stream_replicas: usize,
    /// Directory of the sled checkpoint (the fold and the last sequence applied). Only a
    /// cache: deleting it makes the next start fold the whole log. Defaults to
    /// `.run/preemption-<cluster>`.
    #[arg(long, env = "FAIRSHARE_PREEMPTION_CHECKPOINT")]
    checkpoint_dir: Option<PathBuf>,
    /// Checkpoint after this many log entries...
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_EVENTS", default_value_t = 10_000)]
    checkpoint_events: u64,
    /// ...or this long after the last checkpoint (e.g. 5s), whichever comes first.
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_EVERY", default_value = "5s", value_parser = parse_duration)]
    checkpoint_every: Duration,
    /// Do not serve: re-derive every preemption order in the cluster's log from the log
    /// prefix it names, with the policy flags above (give the ones the service ran with),
    /// print the divergences and exit (status 1 if any).
    #[arg(long)]
    audit: bool,
    /// With `--audit`: hold only orders from this sequence on to this build and these
    /// flags (say, from where they were last changed); earlier findings are counted, not
    /// failed.
    #[arg(long, default_value_t = 1, requires = "audit")]
    audit_from: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = telemetry::init("fairshare-preemption");
    let policy = args.policy.config()?;
    let usage_window_ms = Some(args.usage_window.window_ms()?);
    let client = args
        .nats
        .connect_as(
            "fairshare-preemption",
            fairshare_runtime::auth::Role::Preemption,
        )
        .await?;
    if args.audit {
        let js = async_nats::jetstream::new(client);
        let mut report = shell::audit_log(&js, &args.cluster, &policy)
            .await
            .with_context(|| format!("cannot read the log of cluster {}", args.cluster))?;
        report.keep_from(args.audit_from);
        fairshare_runtime::out!("{}", report.render(&args.cluster));
        anyhow::ensure!(
            report.divergences.is_empty(),
            "the audit found orders that do not re-derive"
        );
        anyhow::ensure!(
            !report.late.iter().any(|l| l.is_finding()),
            "the audit found orders two passes made for one waiter (TWICE: two instances \
             deciding at once, or a late send)"
        );
        return Ok(());
    }
    let checkpoint_dir = args
        .checkpoint_dir
        .unwrap_or_else(|| PathBuf::from(format!(".run/preemption-{}", args.cluster)));
    let config = Config {
        policy,
        stream_replicas: args.stream_replicas,
        checkpoint_dir: Some(checkpoint_dir),
        checkpoint_every_events: args.checkpoint_events.max(1),
        checkpoint_every: args.checkpoint_every.max(Duration::from_millis(100)),
        usage_window_ms,
        ..Config::new(args.cluster)
    };
    shell::run(client, config, Arc::new(SystemClock), shutdown::signal()).await?;
    Ok(())
}
