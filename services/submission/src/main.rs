//! `fairshare-submission`: validates launcher submissions and cancellations and appends them to
//! the event log. See `fairshare-submission --help`.

use std::sync::Arc;

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
    /// Longest minimum runtime accepted (the contract's cap), e.g. 8h, 90m.
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = telemetry::init("fairshare-submission");
    let client = args.nats.connect("fairshare-submission").await?;
    let config = Config {
        limits: Limits {
            max_min_runtime_s: i64::try_from(args.max_min_runtime.as_secs())
                .context("--max-min-runtime is too large")?,
            max_payload_bytes: args.max_payload_bytes,
            ..Limits::default()
        },
        stream_replicas: args.stream_replicas,
        consume_intake: !args.no_intake,
    };
    fairshare_submission::run(client, config, Arc::new(SystemClock), shutdown::signal()).await?;
    Ok(())
}
