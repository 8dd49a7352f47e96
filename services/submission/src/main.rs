//! `fairshare-submission`: validates launcher submissions and cancellations and appends them to
//! the event log. See `fairshare-submission --help`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fairshare_model::duration::parse_duration;
use fairshare_runtime::cli::NatsArgs;
use fairshare_runtime::{clock::SystemClock, shutdown, telemetry};
use fairshare_submission::{Config, domain::Limits};

/// The fairshare submission service.
///
/// Answers `fairshare.api.submit` and `fairshare.api.cancel` (NATS request/reply) and consumes
/// the durable intake stream `fairshare.intake.<cluster>`. Every flag can also be set with the
/// environment variable named in brackets.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Args {
    #[command(flatten)]
    nats: NatsArgs,
    /// Longest minimum runtime accepted (the contract's cap), e.g. 8h, 90m. Every cluster's
    /// preemption service must honour at least as much (its --max-min-runtime, the same
    /// variable): a job accepted for more is protected only up to that service's cap.
    #[arg(long, env = "FAIRSHARE_MAX_MIN_RUNTIME", default_value = "8h", value_parser = parse_duration)]
    max_min_runtime: std::time::Duration,
    /// Largest launcher payload accepted, in bytes.
    #[arg(long, env = "FAIRSHARE_MAX_PAYLOAD_BYTES", default_value_t = 64 * 1024)]
    max_payload_bytes: usize,
    /// Replicas for streams this service creates: 1 on one server, 3 on a 3-node cluster.
    #[arg(long, env = "FAIRSHARE_STREAM_REPLICAS", default_value_t = 1)]
    stream_replicas: usize,
    /// Do not consume the intake stream (run one instance with it, extra ones without).
    #[arg(long, env = "FAIRSHARE_NO_INTAKE")]
    no_intake: bool,
    /// Directory of the sled checkpoint (the folded jobs and keys, and the last sequence
    /// applied), so a start folds only what came after it. Only a cache: deleting it makes the
    /// next start fold the whole log. One directory per instance; none by default.
    #[arg(long, env = "FAIRSHARE_SUBMISSION_CHECKPOINT")]
    checkpoint_dir: Option<PathBuf>,
    /// Checkpoint after this many log entries...
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_EVENTS", default_value_t = 10_000)]
    checkpoint_events: u64,
    /// ...or this long after the last checkpoint (e.g. 5s), whichever comes first.
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_EVERY", default_value = "5s", value_parser = parse_duration)]
    checkpoint_every: Duration,
    /// How long the service may be cut off from NATS before it stops (exit status 1; under
    /// systemd it is started again). A submission it could not confirm stays in the client
    /// and is sent when it reconnects: after the events stream's 2 h duplicate window it would
    /// be a second job beside the launcher's retry. Above 0 and under 2h.
    #[arg(long, env = "FAIRSHARE_MAX_DISCONNECT", default_value = "1h", value_parser = parse_duration)]
    max_disconnect: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.max_disconnect.is_zero()
        || args.max_disconnect >= fairshare_events::streams::DUPLICATE_WINDOW
    {
        anyhow::bail!(
            "--max-disconnect must be above 0 and under the events stream's duplicate window \
             ({:?}); got {:?}",
            fairshare_events::streams::DUPLICATE_WINDOW,
            args.max_disconnect
        );
    }
    let _telemetry = telemetry::init("fairshare-submission");
    let client = args
        .nats
        .connect_as(
            "fairshare-submission",
            fairshare_runtime::auth::Role::Submission,
        )
        .await?;
    let config = Config {
        limits: Limits {
            max_min_runtime_s: i64::try_from(args.max_min_runtime.as_secs())
                .context("--max-min-runtime is too large")?,
            max_payload_bytes: args.max_payload_bytes,
            ..Limits::default()
        },
        stream_replicas: args.stream_replicas,
        consume_intake: !args.no_intake,
        checkpoint_dir: args.checkpoint_dir,
        checkpoint_every_events: args.checkpoint_events.max(1),
        checkpoint_every: args.checkpoint_every.max(Duration::from_millis(100)),
        max_disconnect: args.max_disconnect,
    };
    fairshare_submission::run(client, config, Arc::new(SystemClock), shutdown::signal()).await?;
    Ok(())
}
