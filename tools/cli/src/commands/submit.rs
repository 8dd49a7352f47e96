//! `fairshare submit` and `fairshare cancel`: what a launcher does, by hand.
//!
//! A submission carries a W3C `traceparent` like a launcher's (SPEC section 3, principle 5):
//! the caller's (`--traceparent`, or the `TRACEPARENT` variable a workflow tool sets), else a
//! new trace. The CLI exports no spans itself; it prints the trace id, under which the
//! services' spans for the job (submit, placement, start, preemptions) can be found.

use anyhow::{Context, bail};
use clap::Args;
use fairshare_events::headers::{TRACEPARENT, TraceParent};
use fairshare_events::pb::{self, cancel_reply, submit_reply};
use fairshare_events::{codec, subjects};
use fairshare_model::duration::parse_duration;
use fairshare_runtime::telemetry::{Handling, Relation, Role};
use std::time::Duration;

use super::Connection;

/// A job to submit.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Cluster to run on.
    #[arg(long, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
    /// Allocation (leaf path in the budget tree), e.g. research/nlp.
    #[arg(long)]
    allocation: String,
    /// Total GPUs.
    #[arg(long, default_value_t = 1)]
    gpus: i64,
    /// Nodes (0: one node if it fits, else whole nodes).
    #[arg(long, default_value_t = 0)]
    nodes: i64,
    /// Minimum runtime, protected from preemption (e.g. 15m, 2h); 0 = unallocated.
    #[arg(long, value_parser = parse_duration)]
    min_runtime: Duration,
    /// The job can be stopped and requeued.
    #[arg(long)]
    resumable: bool,
    /// Priority within the allocation (higher first).
    #[arg(long, default_value_t = 0)]
    priority: i32,
    /// Optional hard time limit (e.g. 24h).
    #[arg(long, value_parser = parse_duration)]
    time_limit: Option<Duration>,
    /// User the job runs for.
    #[arg(long, env = "USER", default_value = "unknown")]
    user: String,
    /// Job name.
    #[arg(long, default_value = "")]
    name: String,
    /// Idempotency key; a retry with the same key returns the same job. Default: a new UUIDv7.
    #[arg(long)]
    key: Option<String>,
    /// Opaque launcher payload (e.g. the command line).
    #[arg(long, default_value = "")]
    payload: String,
    /// Publish to the durable intake instead of waiting for the submission service.
    #[arg(long)]
    intake: bool,
    /// W3C trace context to submit under (`00-<trace id>-<span id>-<flags>`), e.g. a
    /// workflow's; without it the submission starts a new trace. Its trace id is printed.
    #[arg(long, env = "TRACEPARENT")]
    traceparent: Option<String>,
}

/// A job to cancel.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The job id.
    job_id: String,
    /// Why, recorded on the event.
    #[arg(long, default_value = "cancelled by hand")]
    reason: String,
    /// Who asks.
    #[arg(long, env = "USER", default_value = "unknown")]
    requested_by: String,
}

const TIMEOUT: Duration = Duration::from_secs(10);

fn secs(d: Duration) -> anyhow::Result<i64> {
    i64::try_from(d.as_secs()).context("duration too large")
}

/// Submits one job and prints the answer.
pub async fn submit(args: SubmitArgs, conn: &Connection) -> anyhow::Result<()> {
    // Checked before anything is sent: a bad context is the caller's mistake, not a reason
    // to submit outside the trace it names.
    let parent = args
        .traceparent
        .as_deref()
        .map(TraceParent::parse)
        .transpose()
        .context("--traceparent")?;
    let key = args
        .key
        .unwrap_or_else(|| format!("cli-{}", uuid::Uuid::now_v7()));
    let span = Handling::start(
        "cli submit",
        Role::Call,
        parent,
        Relation::Child,
        &[("fairshare.idempotency_key", &key)],
    );
    let trace = span.hand_on();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(TRACEPARENT, trace.to_string().as_str());
    let request = pb::SubmitRequest {
        idempotency_key: key.clone(),
        spec: Some(pb::JobSpec {
            cluster: args.cluster.clone(),
            allocation: args.allocation,
            user: args.user,
            gpus: args.gpus,
            nodes: args.nodes,
            min_runtime_s: secs(args.min_runtime)?,
            resumable: args.resumable,
            priority: args.priority,
            time_limit_s: args.time_limit.map(secs).transpose()?.unwrap_or(0),
            payload: args.payload.into_bytes().into(),
            name: args.name,
        }),
    };
    if args.intake {
        headers.insert(
            fairshare_events::headers::MESSAGE_ID,
            fairshare_events::headers::submission_id(&key).as_str(),
        );
        headers.insert(fairshare_events::headers::IDEMPOTENCY_KEY, key.as_str());
        let ack = conn
            .js
            .publish_with_headers(
                subjects::intake(&args.cluster),
                headers,
                codec::encode(&request),
            )
            .await?
            .await?;
        println!(
            "queued in intake at sequence {} (key {key}); the outcome appears in the log",
            ack.sequence
        );
        println!("trace {:032x}", trace.trace_id);
        return Ok(());
    }
    let reply = tokio::time::timeout(
        TIMEOUT,
        conn.client
            .request_with_headers(subjects::SUBMIT_API, headers, codec::encode(&request)),
    )
    .await
    .context("no answer from the submission service within 10 s")??;
    match codec::decode_submit_reply(&reply.payload)?.result {
        Some(submit_reply::Result::Accepted(a)) => {
            let again = if a.duplicate {
                " (already accepted earlier)"
            } else {
                ""
            };
            println!(
                "accepted job {} at sequence {}{again}",
                a.job_id, a.stream_sequence
            );
            println!("trace {:032x}", trace.trace_id);
            Ok(())
        }
        Some(submit_reply::Result::Rejected(r)) => {
            bail!("rejected ({}): {}", code_name(r.code), r.message)
        }
        None => bail!("empty reply from the submission service"),
    }
}

/// Cancels one job and prints the answer.
pub async fn cancel(args: CancelArgs, conn: &Connection) -> anyhow::Result<()> {
    let request = pb::CancelRequest {
        job_id: args.job_id,
        reason: args.reason,
        requested_by: args.requested_by,
    };
    let reply = tokio::time::timeout(
        TIMEOUT,
        conn.client
            .request(subjects::CANCEL_API, codec::encode(&request)),
    )
    .await
    .context("no answer from the submission service within 10 s")??;
    match codec::decode_cancel_reply(&reply.payload)?.result {
        Some(cancel_reply::Result::Cancelled(c)) => {
            println!(
                "cancelled job {} at sequence {}",
                c.job_id, c.stream_sequence
            );
            Ok(())
        }
        Some(cancel_reply::Result::Rejected(r)) => {
            bail!("refused ({}): {}", code_name(r.code), r.message)
        }
        None => bail!("empty reply from the submission service"),
    }
}

fn code_name(code: i32) -> &'static str {
    pb::RejectionCode::try_from(code)
        .map(|c| c.as_str_name())
        .unwrap_or("UNKNOWN_CODE")
}
