//! Publishing `UsageSnapshot` events for the decision service.
//!
//! On the cadence, a cluster's snapshot is published when an event of that cluster was
//! folded since its last snapshot, or when the last one was published [`MAX_QUIET_MS`] ago or
//! more (running jobs keep charging and the window slides even when no event arrives); on
//! request at once, but at most once every [`ON_REQUEST_GAP_MS`] per cluster. "Ago" is measured on the monotonic clock: a host clock set
//! back an hour must not hold a quiet cluster's snapshots for that hour.
//! The message id names the cluster, the sequence folded and the window end, so a repeat of the
//! same snapshot is dropped by JetStream.

use std::collections::BTreeMap;

use async_nats::jetstream;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::admin;
use fairshare_runtime::envelope::Envelope;

use crate::domain::UsageFold;

/// Longest time a cluster goes without a snapshot on the cadence.
pub const MAX_QUIET_MS: i64 = 60 * 1000;

/// Shortest time between two snapshots of one cluster published on request (by the monotonic
/// clock): any identity that may query may ask for one, and each is an entry in the log, so a
/// caller asking in a loop would otherwise fill the stream. The cadence's own are not counted.
pub const ON_REQUEST_GAP_MS: i64 = 1000;

/// "Now" as the publisher reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Now {
    /// The time a snapshot's window ends at (the host's clock held to the log's time).
    pub at_ms: i64,
    /// The monotonic clock's reading, which paces the cadence.
    pub monotonic_ms: i64,
}

/// A cluster's last snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Published {
    /// The sequence folded into it.
    through: u64,
    /// Its window's end.
    at_ms: i64,
    /// The monotonic reading when it was published.
    monotonic_ms: i64,
}

/// What was last published per cluster.
#[derive(Debug, Default)]
pub(super) struct Publisher {
    /// Cluster -> its last snapshot.
    last: BTreeMap<String, Published>,
    /// Cluster -> sequence of the newest entry filed under it that the fold applied since
    /// this service started ([`Publisher::saw`]): a busy cluster does not make every other
    /// one publish again.
    moved: BTreeMap<String, u64>,
    /// The cluster whose snapshot failed last: the next tick starts after it, so one cluster
    /// that fails every time (a report over the broker's size limit) cannot starve the rest.
    failed_last: Option<String>,
    /// Whether the entry applied last had more behind it (a backlog: a reconnect, a burst).
    /// The cadence waits then: a snapshot's window ends at "now" but covers only the log read
    /// so far, and the decision service takes the snapshot with the later window end, so one
    /// published behind would leave out the starts and ends still unread (a job started then
    /// went uncharged from its start to the window's end). Not for longer than
    /// [`MAX_QUIET_MS`]: a fold that never catches up (more events than it folds) still
    /// publishes, late, rather than leave the decision service on an ever older window.
    behind: bool,
    /// The monotonic reading of the first tick that found the fold behind, while it is.
    behind_since_ms: Option<i64>,
    /// Cluster -> the monotonic reading when its last snapshot on request was published.
    requested: BTreeMap<String, i64>,
}

/// The time to report a cluster at: `now`, or its last event time if that is later (a
/// producer's clock ahead of ours must not make the query fail).
pub(super) fn report_time(fold: &UsageFold, cluster: &str, now_ms: i64) -> i64 {
    fold.cluster(cluster)
        .and_then(|c| c.clock())
        .map_or(now_ms, |clock| now_ms.max(clock))
}

impl Publisher {
    /// Publishes the snapshots the cadence calls for; returns how many it tried. It stops at
    /// the first that fails: the serving loop waits for this call, and with the stream out of
    /// reach every cluster's append would wait out its own timeout, holding up folding, usage
    /// queries and shutdown that many times over. The rest are due again at the next tick,
    /// which starts after the one that failed.
    pub async fn publish_due(
        &mut self,
        fold: &UsageFold,
        js: &jetstream::Context,
        now: Now,
    ) -> usize {
        if self.behind {
            let since = *self.behind_since_ms.get_or_insert(now.monotonic_ms);
            if now.monotonic_ms.saturating_sub(since) < MAX_QUIET_MS {
                return 0;
            }
        } else {
            self.behind_since_ms = None;
        }
        let mut clusters: Vec<String> = fold.cluster_names().map(str::to_owned).collect();
        if let Some(failed) = &self.failed_last {
            let after = clusters.partition_point(|c| c <= failed);
            clusters.rotate_left(after);
        }
        let mut tried = 0;
        for cluster in clusters {
            if !self.due(&cluster, now.monotonic_ms) {
                continue;
            }
            tried += 1;
            if let Err(e) = self.publish(fold, js, &cluster, now).await {
                tracing::warn!(cluster, "usage snapshot not published: {e}");
                self.failed_last = Some(cluster);
                break;
            }
        }
        tried
    }

    /// Whether `cluster`'s snapshot is due on the cadence at the monotonic reading
    /// `monotonic_ms`.
    fn due(&self, cluster: &str, monotonic_ms: i64) -> bool {
        match self.last.get(cluster) {
            None => true,
            Some(last) => {
                self.moved.get(cluster).is_some_and(|m| *m > last.through)
                    || monotonic_ms.saturating_sub(last.monotonic_ms) >= MAX_QUIET_MS
            }
        }
    }

    /// Notes that the fold applied the entry at `sequence`, stored on `subject`, with `pending`
    /// more entries behind it when it was delivered.
    pub fn saw(&mut self, subject: &str, sequence: u64, pending: u64) {
        self.behind = pending > 0;
        let Some(cluster) = subjects::cluster_of(subject) else {
            return;
        };
        match self.moved.get_mut(cluster) {
            Some(m) => *m = (*m).max(sequence),
            None => {
                self.moved.insert(cluster.to_owned(), sequence);
            }
        }
    }

    /// Publishes one cluster's snapshot now because a query asked for it; returns its
    /// sequence. Refused, with nothing appended, within [`ON_REQUEST_GAP_MS`] of the last one
    /// published on request for that cluster.
    pub async fn publish_on_request(
        &mut self,
        fold: &UsageFold,
        js: &jetstream::Context,
        cluster: &str,
        now: Now,
    ) -> Result<u64, String> {
        if let Some(&last) = self.requested.get(cluster) {
            let since = now.monotonic_ms.saturating_sub(last);
            if since < ON_REQUEST_GAP_MS {
                return Err(format!(
                    "a snapshot of cluster {cluster} was published on request {since} ms ago, \
                     and they are published at most once every {ON_REQUEST_GAP_MS} ms per \
                     cluster: retry in {} ms (a query without publish_snapshot is answered at \
                     once)",
                    ON_REQUEST_GAP_MS - since
                ));
            }
        }
        let sequence = self.publish(fold, js, cluster, now).await?;
        self.requested.insert(cluster.to_owned(), now.monotonic_ms);
        Ok(sequence)
    }

    /// Publishes one cluster's snapshot now; returns its sequence.
    async fn publish(
        &mut self,
        fold: &UsageFold,
        js: &jetstream::Context,
        cluster: &str,
        now: Now,
    ) -> Result<u64, String> {
        let at = report_time(fold, cluster, now.at_ms);
        let report = fold.window(cluster, at).map_err(|e| e.to_string())?;
        let through = fold.last_applied();
        let snapshot = report.to_snapshot(through, fold.config().window_ms());
        let event = pb::Event {
            at_ms: at,
            body: Some(Body::UsageSnapshot(snapshot)),
        };
        let envelope = Envelope {
            message_id: format!("usage:{cluster}:{through}:{at}"),
            ..Default::default()
        };
        let sequence = admin::append(js, subjects::usage(cluster), &event, &envelope)
            .await
            .map_err(|e| e.to_string())?;
        let published = Published {
            through,
            at_ms: at,
            monotonic_ms: now.monotonic_ms,
        };
        self.last.insert(cluster.to_owned(), published);
        Ok(sequence)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::domain::FoldConfig;

    fn fold_of(clusters: &[&str]) -> UsageFold {
        let mut fold = UsageFold::new(FoldConfig::default());
        for (i, c) in clusters.iter().enumerate() {
            let event = pb::Event {
                at_ms: 1_000,
                body: Some(Body::NodeRegistered(pb::NodeRegistered {
                    cluster: (*c).into(),
                    node: "n1".into(),
                    gpus: 8,
                })),
            };
            fold.apply(i as u64 + 1, &event);
        }
        fold
    }

    /// A fresh server and its JetStream context (the server lives as long as the first).
    async fn jetstream() -> (fairshare_testkit::NatsServer, jetstream::Context) {
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server
            .jetstream(std::time::Duration::from_secs(5))
            .await
            .unwrap();
        (server, js)
    }

    /// "Now" with the host's clock and the monotonic clock in step.
    fn at(ms: i64) -> Now {
        Now {
            at_ms: ms,
            monotonic_ms: ms,
        }
    }

    /// A quiet cluster's next snapshot is due a minute after its last by the monotonic clock,
    /// whatever the host's clock did meanwhile.
    #[tokio::test]
    async fn a_host_clock_set_back_does_not_hold_a_quiet_clusters_snapshots() {
        let (_server, js) = jetstream().await;
        let fold = fold_of(&["a"]);
        let mut publisher = Publisher::default();
        let hour = 3_600_000;
        assert_eq!(publisher.publish_due(&fold, &js, at(5 * hour)).await, 1);
        // The host's clock set back an hour, then a minute passes.
        let stepped = Now {
            at_ms: 4 * hour + MAX_QUIET_MS,
            monotonic_ms: 5 * hour + MAX_QUIET_MS,
        };
        let early = Now {
            at_ms: stepped.at_ms - 1,
            monotonic_ms: stepped.monotonic_ms - 1,
        };
        assert_eq!(publisher.publish_due(&fold, &js, early).await, 0);
        assert_eq!(publisher.publish_due(&fold, &js, stepped).await, 1);
        // And set an hour ahead: not due again before another minute has passed.
        let ahead = Now {
            at_ms: 6 * hour,
            monotonic_ms: stepped.monotonic_ms + 1_000,
        };
        assert_eq!(publisher.publish_due(&fold, &js, ahead).await, 0);
    }

    /// A caller asking for snapshots in a loop gets one a second per cluster; the others are
    /// refused with the time to wait, and append nothing.
    #[tokio::test]
    async fn snapshots_on_request_come_at_most_once_a_second_per_cluster() {
        let (_server, js) = jetstream().await;
        let fold = fold_of(&["a", "b"]);
        let mut publisher = Publisher::default();
        let first = publisher
            .publish_on_request(&fold, &js, "a", at(10_000))
            .await
            .unwrap();
        // The cadence's own snapshot in between (b's; a's was just published) does not count
        // either way.
        assert_eq!(publisher.publish_due(&fold, &js, at(10_100)).await, 1);
        let refused = publisher
            .publish_on_request(&fold, &js, "a", at(10_600))
            .await
            .unwrap_err();
        assert!(refused.contains("retry in 400 ms"), "{refused}");
        // Nothing was appended for it: the next snapshot is the one right after the cadence's.
        let mut stream = js
            .get_stream(fairshare_events::streams::EVENTS_STREAM)
            .await
            .unwrap();
        let last = stream.info().await.unwrap().state.last_sequence;
        assert_eq!(last, first + 1);
        // Another cluster is not held up; a second later, the first is not either.
        publisher
            .publish_on_request(&fold, &js, "b", at(10_600))
            .await
            .unwrap();
        publisher
            .publish_on_request(&fold, &js, "a", at(11_000))
            .await
            .unwrap();
    }

    /// An event of one cluster makes that cluster's snapshot due, not every cluster's.
    #[tokio::test]
    async fn only_the_cluster_that_moved_publishes_again() {
        let (_server, js) = jetstream().await;
        let mut fold = fold_of(&["a", "b", "c"]);
        let mut publisher = Publisher::default();
        assert_eq!(publisher.publish_due(&fold, &js, at(2_000)).await, 3);
        let node = pb::Event {
            at_ms: 2_500,
            body: Some(Body::NodeRegistered(pb::NodeRegistered {
                cluster: "b".into(),
                node: "n2".into(),
                gpus: 8,
            })),
        };
        fold.apply(4, &node);
        // Delivered with more behind it: the cadence waits for the rest.
        publisher.saw(&subjects::node("b", "n2"), 4, 3);
        assert_eq!(publisher.publish_due(&fold, &js, at(3_000)).await, 0);
        publisher.saw(&subjects::node("b", "n2"), 4, 0);
        assert_eq!(publisher.publish_due(&fold, &js, at(3_000)).await, 1);
        let last = |c: &str| publisher.last.get(c).map(|p| (p.through, p.at_ms));
        assert_eq!(last("b"), Some((4, 3_000)));
        assert_eq!(last("a"), Some((3, 2_000)), "not again");
        assert_eq!(publisher.publish_due(&fold, &js, at(4_000)).await, 0);
        // Behind for a whole quiet period: published all the same.
        fold.apply(5, &node);
        publisher.saw(&subjects::node("b", "n2"), 5, 2);
        assert_eq!(publisher.publish_due(&fold, &js, at(5_000)).await, 0);
        let late = at(5_000 + MAX_QUIET_MS);
        assert!(publisher.publish_due(&fold, &js, late).await >= 1);
        assert_eq!(publisher.last.get("b").map(|p| p.through), Some(5));
    }

    #[tokio::test]
    async fn the_cadence_publishes_every_cluster_and_stops_at_the_first_failure() {
        let mut server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server
            .jetstream(std::time::Duration::from_millis(500))
            .await
            .unwrap();
        let fold = fold_of(&["a", "b", "c"]);
        let mut publisher = Publisher::default();
        assert_eq!(publisher.publish_due(&fold, &js, at(2_000)).await, 3);
        assert_eq!(publisher.last.len(), 3);
        assert_eq!(
            publisher.publish_due(&fold, &js, at(3_000)).await,
            0,
            "none due"
        );
        // A minute later all three are due again, and the stream is gone: one try, not three
        // timeouts in a row.
        server.kill();
        let later = 2_000 + MAX_QUIET_MS;
        assert_eq!(publisher.publish_due(&fold, &js, at(later)).await, 1);
        assert_eq!(publisher.failed_last.as_deref(), Some("a"));
        // The next tick starts after the cluster that failed, so none is starved for good.
        assert_eq!(publisher.publish_due(&fold, &js, at(later)).await, 1);
        assert_eq!(publisher.failed_last.as_deref(), Some("b"));
        assert_eq!(publisher.publish_due(&fold, &js, at(later)).await, 1);
        assert_eq!(publisher.failed_last.as_deref(), Some("c"));
        assert_eq!(publisher.publish_due(&fold, &js, at(later)).await, 1);
        assert_eq!(publisher.failed_last.as_deref(), Some("a"), "round again");
    }
}
