//! The NATS side of the accounting service.
//!
//! Start-up: load the sled checkpoint (state and last applied sequence) if it is readable, was
//! folded with the configured window and cluster filter, and is not past the log's end;
//! otherwise start empty; then fold the log from the next sequence to its current end. Serving: keep folding new entries in stream order; write the
//! checkpoint every N events or T seconds; publish a `UsageSnapshot` per cluster on a steady
//! cadence and on request; answer usage queries over request/reply.
//!
//! One task owns the fold, so entries are applied strictly in stream order and queries see a
//! state that is a prefix of the log (`through_sequence` in every answer says which).

mod answer;
pub mod audit;
mod snapshot;

pub use answer::report;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use fairshare_events::subjects;
use fairshare_runtime::checkpoint::{CheckpointError, CheckpointStore, folded_from_this_log};
use fairshare_runtime::clock::Clock;
use fairshare_runtime::held_clock::HeldClock;
use fairshare_runtime::log::{FollowError, Follower, LogEntry, log_position};
use fairshare_runtime::nats::{StreamSetupError, ensure_streams};
use fairshare_runtime::telemetry::{self, Relation};
use futures::StreamExt;

use crate::domain::{Applied, FoldConfig, MAX_AHEAD_OF_LOG_MS, Skip, UsageFold};

/// Format version of this service's checkpoints; bump it when the fold's serde form changes,
/// or what it folds. 2: jobs remember whether they resume, and a placed state. 3: job events
/// filed under another cluster than their job's are skipped. 4: preemption orders' grace
/// deadlines stop the charge. 5: a start counts only for a placed job.
const CHECKPOINT_VERSION: u32 = 5;

/// Tag of this service's checkpoints: names the clusters folded (one, or every cluster), so a
/// checkpoint folded with another cluster filter is rebuilt, not resumed: resumed, it would
/// lack the events its filter skipped (or keep clusters this instance no longer follows).
pub fn checkpoint_kind(cluster: Option<&str>) -> String {
    format!(
        "fairshare-accounting/UsageFold/{}",
        cluster.unwrap_or("every-cluster")
    )
}

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The sliding window and the fold's other settings.
    pub fold: FoldConfig,
    /// Where the sled checkpoint lives.
    pub checkpoint_dir: PathBuf,
    /// Checkpoint after this many applied entries...
    pub checkpoint_every_events: u64,
    /// ...or this long after the last checkpoint, whichever comes first.
    pub checkpoint_every: Duration,
    /// Publish each cluster's snapshot this often while its usage keeps changing.
    pub snapshot_every: Duration,
    /// Only this cluster's events (one instance per cluster); `None` folds every cluster.
    pub cluster: Option<String>,
    /// Replicas for streams this service creates.
    pub stream_replicas: usize,
}

impl Config {
    /// Defaults with the checkpoint in `checkpoint_dir`.
    pub fn new(checkpoint_dir: PathBuf) -> Self {
        Self {
            fold: FoldConfig::default(),
            checkpoint_dir,
            checkpoint_every_events: 10_000,
            checkpoint_every: Duration::from_secs(5),
            snapshot_every: Duration::from_secs(10),
            cluster: None,
            stream_replicas: 1,
        }
    }
}

/// Why the service stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The `--cluster` given is not a cluster name (one subject token: letters, digits, `_`
    /// and `-`, starting with a letter or digit): it would match no event and answer no query.
    #[error(
        "{0:?} is not a valid cluster name (letters, digits, _ and -, starting with a letter or digit)"
    )]
    InvalidCluster(String),
    /// The streams could not be created or updated.
    #[error(transparent)]
    Streams(#[from] StreamSetupError),
    /// The log could not be followed.
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// The checkpoint store could not be opened or written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The usage API could not be subscribed.
    #[error("cannot subscribe to usage queries: {0}")]
    Subscribe(String),
}

/// Subjects the fold needs: job lifecycle, budget trees, inventory (not snapshots, rejections
/// or maintenance windows).
pub fn log_filters(cluster: Option<&str>) -> Vec<String> {
    let c = cluster.unwrap_or("*");
    let p = subjects::EVENTS_PREFIX;
    vec![
        format!("{p}.{c}.job.*.*"),
        format!("{p}.{c}.policy"),
        format!("{p}.{c}.node.*"),
    ]
}

/// A started service: its fold is at the log's end as of start-up.
pub struct Service {
    /// The fold; owned by the serving loop.
    fold: UsageFold,
    /// Delivers new log entries.
    follower: Follower,
    /// Where checkpoints go.
    store: CheckpointStore,
    /// For replies and snapshots.
    js: jetstream::Context,
    client: async_nats::Client,
    /// Usage queries.
    queries: async_nats::Subscriber,
    /// "Now": the host's clock held to the log's time, so a host clock set an hour ahead
    /// neither reports windows ending in the future nor, set back, ones that stop moving.
    now: HeldClock,
    config: Config,
    /// Entries applied since the last checkpoint.
    since_checkpoint: u64,
    /// When the stream stored the last entry the fold applied (what a checkpoint of it names,
    /// so that a resume can tell the log it was folded from from one rolled back and written
    /// anew; `None` if unknown).
    last_stored_ms: Option<i64>,
    /// The checkpoint's sequence this start resumed from (0: folded from the beginning).
    resumed_from: u64,
}

/// Applies one log entry as the service does (the stream's stored time bounds the event's;
/// an entry that does not decode, or a job event filed under another cluster than its job's,
/// only moves the fold past its sequence); reports what the fold refused. Public so a check can re-fold a log exactly as the service folded it.
pub fn apply_entry(fold: &mut UsageFold, entry: &LogEntry) {
    if entry.event.is_ok()
        && let Some(theirs) = filed_in_another_cluster(fold, &entry.subject)
    {
        tracing::error!(
            sequence = entry.sequence,
            subject = %entry.subject,
            job_cluster = theirs,
            "job event stored under another cluster than its job's, skipped"
        );
        // Like an entry that does not decode: the fold only moves past its sequence.
        fold.apply(entry.sequence, &fairshare_events::pb::Event::default());
        return;
    }
    match &entry.event {
        Ok(event) => {
            let applied = match entry.stored_ms {
                Some(stored) => {
                    if event.at_ms > stored.saturating_add(MAX_AHEAD_OF_LOG_MS) {
                        tracing::warn!(
                            sequence = entry.sequence,
                            subject = %entry.subject,
                            at_ms = event.at_ms,
                            stored_ms = stored,
                            "event stamped well after the log stored it (its writer's clock is ahead?): it takes effect 60 s after it was stored"
                        );
                    }
                    fold.apply_stored(entry.sequence, event, stored)
                }
                None => fold.apply(entry.sequence, event),
            };
            match applied {
                // A producer writing what no service should (a tree that does not validate, a
                // submission without a usable spec): someone must look.
                Applied::Skipped(why @ (Skip::InvalidBudgetTree | Skip::Malformed)) => {
                    tracing::warn!(sequence = entry.sequence, subject = %entry.subject, "not folded: {why:?}");
                }
                // Redeliveries, double stops and the like are routine.
                Applied::Skipped(why) => {
                    tracing::debug!(sequence = entry.sequence, subject = %entry.subject, "not folded: {why:?}");
                }
                // Writers' clocks differ by milliseconds all the time; seconds mean one of
                // them is wrong, and every event of the cluster takes effect late meanwhile.
                // (A clamped event leaves its cluster's clock where it was, so the gap is read
                // after the fold, and only for these: not a look-up per entry.)
                Applied::Clamped => {
                    let behind = subjects::cluster_of(&entry.subject)
                        .and_then(|c| fold.cluster(c)?.clock())
                        .map_or(0, |clock| clock.saturating_sub(event.at_ms));
                    if behind >= CLAMP_WARN_MS {
                        tracing::warn!(
                            sequence = entry.sequence,
                            subject = %entry.subject,
                            behind_ms = behind,
                            "event stamped well before its cluster's latest event (its writer's clock is behind, or another's ahead?): it takes effect at the cluster's clock"
                        );
                    }
                }
                _ => {}
            }
        }
        Err(e) => {
            tracing::error!(sequence = entry.sequence, subject = %entry.subject, "log entry unusable (undecodable or misfiled), skipped: {e}");
            // An event without a body changes nothing but moves the fold past this sequence.
            fold.apply(entry.sequence, &fairshare_events::pb::Event::default());
        }
    }
}

/// How far before its cluster's clock an event may be stamped before the clamp is reported.
const CLAMP_WARN_MS: i64 = 5_000;

/// The cluster of the live job a job event's subject names, when the subject files it under
/// another cluster. A job's events belong to its cluster only: NATS lets a launcher publish on
/// any cluster's job subjects its permissions cover, and job bodies name no cluster (so
/// [`subjects::check_filed`] cannot see it). An instance folding every cluster would
/// otherwise stop or start charging a job on an event that the job's own cluster's instances
/// (and its decision service) never see.
fn filed_in_another_cluster<'f>(fold: &'f UsageFold, subject: &str) -> Option<&'f str> {
    let (job_id, _) = subjects::job_event_parts(subject)?;
    let filed = subjects::cluster_of(subject)?;
    fold.job_cluster(job_id).filter(|theirs| *theirs != filed)
}

impl Service {
    /// Loads the checkpoint (or starts empty) and folds the log to its current end.
    pub async fn start(
        client: async_nats::Client,
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ServiceError> {
        if let Some(cluster) = config
            .cluster
            .as_ref()
            .filter(|c| !subjects::is_valid_token(c))
        {
            return Err(ServiceError::InvalidCluster(cluster.clone()));
        }
        let js = jetstream::new(client.clone());
        ensure_streams(&js, config.stream_replicas).await?;
        let log = log_position(&js).await?;
        let store = CheckpointStore::open(
            &config.checkpoint_dir,
            &log.checkpoint_kind(&checkpoint_kind(config.cluster.as_deref())),
            CHECKPOINT_VERSION,
        )?;
        let fresh = || (UsageFold::new(config.fold), None);
        let (mut fold, mut last_stored_ms) = match store.load::<UsageFold>() {
            Ok(Some(cp))
                if cp.state.config() == config.fold
                    && cp.state.last_applied() == cp.sequence
                    && cp.state.links_hold() =>
            {
                // A checkpoint past the log's end belongs to another incarnation of the stream
                // (a server whose store was wiped): resumed, it would skip the new log's first
                // events as already folded. So does one whose last entry the log no longer
                // holds as folded (restored from a backup, entries lost and written anew).
                let log_end = log.end;
                if cp.sequence > log_end {
                    tracing::warn!(
                        checkpoint = cp.sequence,
                        log_end,
                        "checkpoint is ahead of the log; rebuilding from the log"
                    );
                    store.discard();
                    fresh()
                } else if !folded_from_this_log(&js, "accounting", cp.sequence, cp.stored_ms).await
                {
                    store.discard();
                    fresh()
                } else {
                    tracing::info!(sequence = cp.sequence, "resuming from checkpoint");
                    (cp.state, cp.stored_ms)
                }
            }
            Ok(Some(_)) => {
                tracing::warn!(
                    "checkpoint was folded with other settings, or does not hold together; \
                     rebuilding from the log"
                );
                store.discard();
                fresh()
            }
            Ok(None) => fresh(),
            Err(e) => {
                tracing::warn!("{e}; rebuilding from the log");
                store.discard();
                fresh()
            }
        };
        let resumed_from = fold.last_applied();
        let from = resumed_from + 1;
        let mut follower =
            Follower::start(&js, from, log_filters(config.cluster.as_deref())).await?;
        follower.resuming_after(last_stored_ms);
        follower.expect_log(&log)?;
        let mut now = HeldClock::new(clock, "no usage window ends in the future or stops moving");
        let applied = follower
            .catch_up(|entry| {
                let _span = telemetry::entry_span("accounting", &entry, Relation::Linked);
                now.observe(&entry);
                apply_entry(&mut fold, &entry);
                if fold.last_applied() == entry.sequence {
                    last_stored_ms = entry.stored_ms;
                }
            })
            .await?;
        // Should the server's time not be read, the newest entry does not stand for the log's
        // time: this service follows only job, policy and node subjects, so on a quiet cluster
        // its newest entry may be hours older than the log's end (the usage snapshots and the
        // preemption service's events are not read), and windows would end hours in the past.
        now.caught_up_with(&js, false).await;
        tracing::info!(
            resumed_from,
            from,
            applied,
            last = fold.last_applied(),
            "log folded"
        );
        let usage_subject = match &config.cluster {
            Some(c) => subjects::usage_api(c),
            None => subjects::USAGE_API_ALL.to_owned(),
        };
        let queries = client
            .queue_subscribe(usage_subject, subjects::ACCOUNTING_QUEUE_GROUP.to_owned())
            .await
            .map_err(|e| ServiceError::Subscribe(e.to_string()))?;
        // Served from here on: a caller that sees `start` return may ask at once.
        fairshare_runtime::log::settle_subscriptions(&client)
            .await
            .map_err(|e| ServiceError::Subscribe(e.to_string()))?;
        let mut service = Self {
            fold,
            follower,
            store,
            js,
            client,
            queries,
            now,
            config,
            since_checkpoint: applied,
            last_stored_ms,
            resumed_from,
        };
        service.checkpoint();
        Ok(service)
    }

    /// "Now" for a report or a snapshot, and the monotonic reading that paces the cadence.
    fn read_now(&mut self) -> snapshot::Now {
        snapshot::Now {
            at_ms: self.now.now_ms(),
            monotonic_ms: self.now.monotonic_ms(),
        }
    }

    /// The checkpoint sequence this start resumed from; 0 when it folded from the beginning.
    pub fn resumed_from(&self) -> u64 {
        self.resumed_from
    }

    /// The fold as it stands (for tests and tools in the same process).
    pub fn fold(&self) -> &UsageFold {
        &self.fold
    }

    /// Writes the checkpoint if anything was folded since the last one. A failed write (a full
    /// disk) is logged and the service goes on: the checkpoint is a cache, and the next write
    /// is tried at the next interval, not at every entry.
    fn checkpoint(&mut self) {
        if self.since_checkpoint == 0 {
            return;
        }
        self.since_checkpoint = 0;
        if let Err(e) =
            self.store
                .save_at(self.fold.last_applied(), self.last_stored_ms, &self.fold)
        {
            tracing::warn!(
                sequence = self.fold.last_applied(),
                "checkpoint not written (the service goes on; a restart folds more of the log): {e}"
            );
        }
    }

    /// Serves until `shutdown` completes, then writes a last checkpoint.
    pub async fn serve(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<UsageFold, ServiceError> {
        tokio::pin!(shutdown);
        let mut checkpoint_timer = tokio::time::interval(self.config.checkpoint_every);
        let mut snapshot_timer = tokio::time::interval(self.config.snapshot_every);
        let mut snapshots = snapshot::Publisher::default();
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                entry = self.follower.next() => match entry {
                    Some(Ok(entry)) => {
                        let _span = telemetry::entry_span("accounting", &entry, Relation::Child);
                        self.now.observe(&entry);
                        apply_entry(&mut self.fold, &entry);
                        if self.fold.last_applied() == entry.sequence {
                            self.last_stored_ms = entry.stored_ms;
                        }
                        snapshots.saw(&entry.subject, entry.sequence, entry.pending);
                        self.since_checkpoint += 1;
                        if self.since_checkpoint >= self.config.checkpoint_every_events {
                            self.checkpoint();
                        }
                    }
                    // Another log now: the fold describes none of it.
                    Some(Err(e)) if e.ends_following() => return Err(e.into()),
                    Some(Err(e)) => tracing::warn!("log follower: {e}"),
                    None => return Err(FollowError::Delivery("connection closed".into()).into()),
                },
                Some(message) = self.queries.next() => {
                    let now = self.read_now();
                    answer::usage_query(&self.fold, &self.js, &self.client, now, &mut snapshots, message).await;
                }
                _ = checkpoint_timer.tick() => self.checkpoint(),
                _ = snapshot_timer.tick() => {
                    // The server's time read again when due; a start that could not read it
                    // tries on each tick: until then "now" is held only from below (a quiet
                    // cluster may see no entry arrive live for hours).
                    self.now.refresh_anchor(&self.js).await;
                    let now = self.read_now();
                    snapshots.publish_due(&self.fold, &self.js, now).await;
                }
            }
        }
        self.checkpoint();
        let _ = self.queries.unsubscribe().await;
        tracing::info!(
            last = self.fold.last_applied(),
            "accounting service stopped"
        );
        Ok(self.fold)
    }
}

/// Starts the service and serves until `shutdown` completes.
pub async fn run(
    client: async_nats::Client,
    config: Config,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    Service::start(client, config, clock)
        .await?
        .serve(shutdown)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use fairshare_events::pb::{self, event::Body};

    use super::*;
    use crate::domain::FoldConfig;

    /// Tripwire for the checkpoint format (see `fairshare_testkit::sample_log`): if this
    /// fails, what the fold keeps for the sample log changed. Bump `CHECKPOINT_VERSION` (an
    /// older checkpoint would otherwise be resumed as though this code had folded it, and
    /// differ from a rebuild from the log), then put the new pair here.
    #[test]
    fn the_checkpoint_format_version_moves_with_what_the_fold_keeps() {
        use fairshare_testkit::sample_log::{sample_log, state_fingerprint};
        let mut fold = UsageFold::new(FoldConfig::default());
        for entry in sample_log() {
            apply_entry(&mut fold, &entry);
        }
        assert_eq!(
            (CHECKPOINT_VERSION, state_fingerprint(&fold)),
            (5, 6_492_986_246_358_643_400),
            "the fold's checkpointed form changed: bump CHECKPOINT_VERSION"
        );
    }

    /// Folds `body` at `at_ms` as the log entry at `sequence`, filed on `subject` (its own
    /// cluster `a`'s subject unless given).
    fn feed(fold: &mut UsageFold, sequence: u64, at_ms: i64, body: Body, subject: Option<String>) {
        let event = pb::Event {
            at_ms,
            body: Some(body),
        };
        let subject = subject.unwrap_or_else(|| subjects::for_event("a", &event).unwrap());
        apply_entry(
            fold,
            &LogEntry {
                sequence,
                subject,
                event: Ok(event),
                pending: 0,
                trace: None,
                stored_ms: None,
            },
        );
    }

    /// A launcher that may publish on cluster `b`'s job subjects files a finish of cluster
    /// `a`'s job there: the job keeps running (and charging) until its own cluster says it
    /// ended.
    #[test]
    fn a_job_event_filed_under_another_cluster_changes_nothing() {
        let mut fold = UsageFold::new(FoldConfig::default());
        use fairshare_testkit::events::{node_registered, one_allocation_tree, one_gpu_submitted};
        feed(&mut fold, 1, 0, one_allocation_tree("a", "x"), None);
        feed(&mut fold, 2, 0, node_registered("a", "n1", 8), None);
        let submitted = one_gpu_submitted("a", "x", "j", "k");
        feed(&mut fold, 3, 1_000, submitted, None);
        let placed = Body::JobPlaced(pb::JobPlaced {
            job_id: "j".into(),
            nodes: vec![pb::NodeGpus {
                node: "n1".into(),
                gpus: 1,
            }],
            basis: None,
        });
        feed(&mut fold, 4, 1_000, placed, None);
        let started = Body::JobStarted(pb::JobStarted { job_id: "j".into() });
        feed(&mut fold, 5, 1_000, started, None);
        let finished = || {
            Body::JobFinished(pb::JobFinished {
                job_id: "j".into(),
                exit_code: 0,
            })
        };
        let elsewhere = subjects::job_event("b", "j", "job_finished");
        feed(&mut fold, 6, 2_000, finished(), Some(elsewhere));
        assert_eq!(fold.last_applied(), 6);
        assert_eq!(fold.job_cluster("j"), Some("a"), "still running");
        assert_eq!(
            fold.account("a", "x", 11_000).unwrap().charged_gpu_ms,
            10_000
        );
        // Its own cluster's finish ends it.
        feed(&mut fold, 7, 11_000, finished(), None);
        assert_eq!(fold.job_cluster("j"), None);
        assert_eq!(
            fold.account("a", "x", 20_000).unwrap().charged_gpu_ms,
            10_000
        );
    }
}
