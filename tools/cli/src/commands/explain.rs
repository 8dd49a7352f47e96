//! `fairshare explain`: where a job stands and, if it waits, why (asked of the cluster's
//! decision service, which re-runs its decision on demand).

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use fairshare_events::pb::{self, explain_reply};
use fairshare_events::{codec, subjects};

use super::{Connection, format_ms};

/// Which job.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The job id.
    job_id: String,
    /// The job's cluster.
    #[arg(long, env = "FAIRSHARE_CLUSTER")]
    cluster: String,
}

/// Prints the explanation.
pub async fn explain(args: ExplainArgs, conn: &Connection) -> anyhow::Result<()> {
    let request = pb::ExplainRequest {
        job_id: args.job_id.clone(),
    };
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        conn.client.request(
            subjects::explain_api(&args.cluster),
            codec::encode(&request),
        ),
    )
    .await
    .context("no answer from the decision service within 10 s")??;
    let e = match codec::decode_explain_reply(&reply.payload)?.result {
        Some(explain_reply::Result::Explanation(e)) => e,
        Some(explain_reply::Result::Rejected(r)) => bail!("refused: {}", r.message),
        None => bail!("empty reply from the decision service"),
    };
    println!("job {} ({}) is {}", e.job_id, e.allocation, e.status);
    if e.allocation_rank > 0 {
        println!(
            "  its allocation ranks {} of {} by fair share",
            e.allocation_rank, e.allocations_ranked
        );
    }
    if !e.reason.is_empty() {
        println!("  why: {} [{}]", e.reason, e.reason_code);
    }
    for n in &e.nodes {
        println!("  holds {} GPUs on {}", n.gpus, n.node);
    }
    if let Some(p) = &e.last_preemption {
        let for_job = if p.for_job_id.is_empty() {
            String::new()
        } else {
            format!(" for job {}", p.for_job_id)
        };
        println!(
            "  last preemption order: {}{for_job}, to stop by {}",
            format_ms(p.ordered_at_ms),
            format_ms(p.grace_deadline_ms)
        );
        // Running or preempted, the reason is the "why" above; queued again, it is not.
        if e.status == "queued" {
            println!("    {}", p.reason);
        }
    }
    if let Some(b) = e.basis {
        println!(
            "  (as of sequence {}, {})",
            b.through_sequence,
            format_ms(b.computed_at_ms)
        );
    }
    Ok(())
}
