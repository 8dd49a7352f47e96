//! Answering `fairshare.api.usage.<cluster>` queries from the fold.

use async_nats::jetstream;
use fairshare_events::pb::{self, usage_reply};
use fairshare_events::{codec, subjects};

use super::snapshot::{Publisher, report_time};
use crate::domain::{LedgerTotals, UsageFold, report::saturate};

fn rejection(code: pb::RejectionCode, message: String) -> pb::Rejection {
    pb::Rejection {
        code: code as i32,
        message,
    }
}

fn ledger_entry(allocation: &str, t: &LedgerTotals) -> pb::LedgerEntry {
    pb::LedgerEntry {
        allocation: allocation.to_owned(),
        demand_gpu_ms: saturate(t.demand_gpu_ms),
        owed_gpu_ms: saturate(t.owed_gpu_ms),
        delivered_gpu_ms: saturate(t.delivered_gpu_ms),
        delivered_owed_gpu_ms: saturate(t.delivered_owed_gpu_ms),
    }
}

/// The report for one query at `now_ms` (or the cluster's last event time, if later), without
/// publishing anything.
pub fn report(
    fold: &UsageFold,
    query: &pb::UsageQuery,
    now_ms: i64,
) -> Result<pb::UsageReport, pb::Rejection> {
    if !subjects::is_valid_token(&query.cluster) {
        return Err(rejection(
            pb::RejectionCode::InvalidName,
            format!("cluster name {:?} is not valid", query.cluster),
        ));
    }
    let at = report_time(fold, &query.cluster, now_ms);
    let window = fold
        .window(&query.cluster, at)
        .map_err(|e| rejection(pb::RejectionCode::UnknownCluster, e.to_string()))?;
    let ledger = fold
        .ledger(&query.cluster, at)
        .map_err(|e| rejection(pb::RejectionCode::UnknownCluster, e.to_string()))?;
    let account = |a: &crate::domain::AccountUsage, allocation: bool| pb::AccountUsage {
        path: a.path.clone(),
        allocation,
        charged_gpu_ms: a.charged_gpu_ms,
        allocated_gpu_ms: a.allocated_gpu_ms,
        running_gpus: a.running_gpus,
        queued_gpus: a.queued_gpus,
    };
    let mut accounts: Vec<pb::AccountUsage> = window
        .allocations
        .iter()
        .map(|a| account(a, true))
        .chain(window.subtrees.iter().map(|a| account(a, false)))
        .collect();
    let mut entries: Vec<pb::LedgerEntry> = ledger
        .allocations
        .iter()
        .map(|r| ledger_entry(&r.allocation, &r.totals))
        .collect();
    if !query.path.is_empty() {
        accounts.retain(|a| a.path == query.path);
        if accounts.is_empty() {
            return Err(rejection(
                pb::RejectionCode::UnknownAccount,
                format!(
                    "{:?} is no account of cluster {:?} with usage or allocated time in the window",
                    query.path, query.cluster
                ),
            ));
        }
        entries.retain(|e| e.allocation == query.path);
    }
    Ok(pb::UsageReport {
        cluster: query.cluster.clone(),
        window_end_ms: window.window_end_ms,
        window_ms: i64::try_from(fold.config().window_ms()).unwrap_or(i64::MAX),
        through_sequence: fold.last_applied(),
        capacity_gpu_ms: window.capacity_gpu_ms,
        accounts,
        unallocated_gpu_ms: window.unallocated_gpu_ms,
        ledger: entries,
        ledger_overall: Some(ledger_entry("", &ledger.overall)),
        snapshot_sequence: 0,
        cluster_gpus: window.cluster_gpus,
    })
}

/// Answers one query message (and publishes a snapshot if it asks for one).
pub(super) async fn usage_query(
    fold: &UsageFold,
    js: &jetstream::Context,
    client: &async_nats::Client,
    now_ms: i64,
    snapshots: &mut Publisher,
    message: async_nats::Message,
) {
    let Some(reply_to) = message.reply.clone() else {
        return;
    };
    let result = match codec::decode_usage_query(&message.payload) {
        Err(e) => Err(rejection(pb::RejectionCode::Malformed, e.to_string())),
        Ok(query) => match report(fold, &query, now_ms) {
            Ok(mut report) if query.publish_snapshot => {
                match snapshots.publish(fold, js, &query.cluster, now_ms).await {
                    Ok(sequence) => {
                        report.snapshot_sequence = sequence;
                        Ok(report)
                    }
                    Err(e) => Err(rejection(pb::RejectionCode::Unavailable, e)),
                }
            }
            other => other,
        },
    };
    let reply = pb::UsageReply {
        result: Some(match result {
            Ok(r) => usage_reply::Result::Report(r),
            Err(r) => usage_reply::Result::Rejected(r),
        }),
    };
    if let Err(e) = client.publish(reply_to, codec::encode(&reply)).await {
        tracing::warn!("could not send usage reply: {e}");
    }
}
