//! Answering `fairshare.api.usage.<cluster>` queries from the fold.

use async_nats::jetstream;
use fairshare_events::pb::{self, usage_reply};
use fairshare_events::{codec, subjects};

use super::snapshot::{Now, Publisher, report_time};
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
    // An account and everything below it (`status` writes inner accounts with a trailing
    // slash, so that form is taken too).
    let path = query.path.strip_suffix('/').unwrap_or(&query.path);
    if !path.is_empty() {
        let within = |p: &str| {
            p.strip_prefix(path)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        accounts.retain(|a| within(&a.path));
        if accounts.is_empty() {
            return Err(rejection(
                pb::RejectionCode::UnknownAccount,
                format!(
                    "{:?} is no account of cluster {:?} with usage or allocated time in the window",
                    query.path, query.cluster
                ),
            ));
        }
        entries.retain(|e| within(&e.allocation));
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

/// Whether a query about `cluster` came on that cluster's subject. Instances filtered to one
/// cluster and one for every cluster answer in one queue group, so a query about another
/// cluster than its subject names would be refused or answered (and a snapshot published)
/// depending on which instance it reached.
fn asked_on_its_subject(subject: &str, cluster: &str) -> bool {
    subject
        .strip_prefix(subjects::usage_api("").as_str())
        .is_some_and(|asked| asked == cluster)
}

/// Answers one query message (and publishes a snapshot if it asks for one).
pub(super) async fn usage_query(
    fold: &UsageFold,
    js: &jetstream::Context,
    client: &async_nats::Client,
    now: Now,
    snapshots: &mut Publisher,
    message: async_nats::Message,
) {
    let Some(reply_to) = fairshare_runtime::reply::inbox_or_warn(&message) else {
        return;
    };
    let result = match codec::decode_usage_query(&message.payload) {
        Err(e) => Err(rejection(pb::RejectionCode::Malformed, e.to_string())),
        Ok(query) if !asked_on_its_subject(&message.subject, &query.cluster) => Err(rejection(
            pb::RejectionCode::InvalidName,
            format!(
                "a query about cluster {:?} asked on {}: ask on {}",
                query.cluster,
                message.subject,
                subjects::usage_api(&query.cluster)
            ),
        )),
        Ok(query) => match report(fold, &query, now.at_ms) {
            Ok(mut report) if query.publish_snapshot => {
                match snapshots
                    .publish_on_request(fold, js, &query.cluster, now)
                    .await
                {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use fairshare_events::pb::{self, event::Body};

    use super::{asked_on_its_subject, report};
    use crate::domain::{FoldConfig, UsageFold};

    #[test]
    fn a_query_is_answered_only_on_its_clusters_subject() {
        use fairshare_events::subjects::usage_api;
        assert!(asked_on_its_subject(&usage_api("c1"), "c1"));
        assert!(!asked_on_its_subject(&usage_api("c1"), "c2"));
        assert!(!asked_on_its_subject(&usage_api("c1"), ""));
        assert!(!asked_on_its_subject("elsewhere.c1", "c1"));
    }

    fn account(name: &str, share: u64, children: Vec<pb::Account>) -> pb::Account {
        pb::Account {
            name: name.into(),
            share,
            children,
        }
    }

    /// research/{nlp,vision} and infra on one 8-GPU node, an hour in.
    fn fold() -> UsageFold {
        let mut fold = UsageFold::new(FoldConfig::default());
        let bodies = [
            Body::BudgetTreeSet(pb::BudgetTreeSet {
                cluster: "c".into(),
                accounts: vec![
                    account(
                        "research",
                        1,
                        vec![account("nlp", 1, vec![]), account("vision", 1, vec![])],
                    ),
                    account("infra", 1, vec![]),
                ],
            }),
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: "c".into(),
                node: "n1".into(),
                gpus: 8,
            }),
        ];
        for (i, body) in bodies.into_iter().enumerate() {
            let event = pb::Event {
                at_ms: 0,
                body: Some(body),
            };
            fold.apply(i as u64 + 1, &event);
        }
        fold
    }

    fn paths(query_path: &str) -> Result<Vec<String>, pb::Rejection> {
        let query = pb::UsageQuery {
            cluster: "c".into(),
            path: query_path.into(),
            publish_snapshot: false,
        };
        report(&fold(), &query, 3_600_000).map(|r| {
            let mut paths: Vec<String> = r.accounts.into_iter().map(|a| a.path).collect();
            paths.sort();
            paths
        })
    }

    #[test]
    fn a_path_reports_its_account_and_every_account_below_it() {
        let research = ["research", "research/nlp", "research/vision"];
        assert_eq!(paths("research").unwrap(), research);
        // As `status` writes an inner account.
        assert_eq!(paths("research/").unwrap(), research);
        assert_eq!(paths("research/nlp").unwrap(), ["research/nlp"]);
        // A name's beginning is no account.
        assert_eq!(
            paths("research/nl").unwrap_err().code,
            pb::RejectionCode::UnknownAccount as i32
        );
        assert_eq!(paths("").unwrap().len(), 4);
    }
}
