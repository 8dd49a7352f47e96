//! The NATS side of the decision service: one instance per GPU cluster.
//!
//! Start-up ([`Service::start`]): put the streams in place; load the sled checkpoint
//! ([`Config::checkpoint_dir`]: the [`LogFold`] and the last stream sequence it applied,
//! written together) if there is a usable one, otherwise start empty; then fold the cluster's
//! log (`fairshare.events.<cluster>.>`: jobs, budget trees, nodes, maintenance, usage
//! snapshots) from the next sequence to its current end. The checkpoint is a cache (SPEC
//! section 3, principle 1): its tag names the cluster ([`checkpoint_kind`]), and one that is
//! unreadable, of another format version, of another cluster, whose fold disagrees with the
//! sequence it was saved at, or that is ahead of the log's end is reported and ignored. So
//! deleting the directory is always safe: the next start folds from sequence 1 and holds the
//! identical fold ([`Service::resumed_from`] says which happened). Without a checkpoint
//! directory every start replays the whole log.
//!
//! Checkpoints are written after catch-up, every `checkpoint_every_events` entries or
//! `checkpoint_every`, whichever comes first, and at shutdown. A failed write is logged and
//! the service keeps deciding (the next write carries the then current fold). Writing is
//! synchronous on the serving task: it encodes the whole fold (live jobs and their trace
//! contexts, nodes, budget tree, usage) with bincode and flushes sled, so a cycle can wait for
//! it.
//!
//! Serving ([`Service::serve`]): one task owns the fold and the cycles, so a cycle always
//! decides from a prefix of the log and names it exactly.
//!
//! - Cycles run only while this instance holds the cluster's decision lease
//!   ([`fairshare_runtime::lease`], kept by its own task from start-up on). Another instance
//!   for the cluster folds the log meanwhile and takes over when the lease is let go or runs
//!   out; on taking it, the first cycle waits until the fold holds the cluster's log as it
//!   stood then. An instance whose lease another took stops ([`ServiceError::LeaseLost`]).
//! - It keeps folding new entries. Any entry that changes the state (submission, requeue, job
//!   end, start, preemption order, node or budget change, maintenance, usage snapshot) makes
//!   the state dirty; its own placements do not (they free nothing).
//! - A cycle runs after catch-up, then on each change (at once after a quiet spell, at most
//!   one per `debounce`, see `pace`), and every `cycle_every` regardless. Cycle numbers grow
//!   monotonically, also across restarts (they continue from the highest cycle any placement
//!   in the log names).
//! - A cycle runs [`decide()`](crate::domain::decide()) at the clock's "now", held to the
//!   log's time ([`HeldClock`]: never before the newest time the stream stored an entry at, or
//!   a host clock set back would decide in the past; never more than a minute past the log's
//!   time, or one set ahead would charge running jobs for time not yet run) and publishes each
//!   placement (see `publish`: deterministic message id `placed:<job>:<expected>` and
//!   optimistic concurrency over the job's subjects, expected = the newest event of the job
//!   the state had folded, so a placement never lands after a cancel).
//! - The next cycle waits until the fold has applied every placement the previous cycle got
//!   acknowledged (the barrier). Otherwise it would see their GPUs as free and hand them out
//!   again. A placement whose outcome is unknown (timeout) is sent again, identical, and the
//!   barrier raised to what the server answers (its sequence, or the job's newest event if it
//!   was refused) before any further cycle; so is a refused one (see `publish`).
//! - The latest cycle's waiting reasons are kept for [`Explainer`]s (see `explain`).
//! - Each placement has its own span, a child of the job's newest traced entry (its
//!   submission, or its requeue), and `JobPlaced` carries it as `traceparent`
//!   ([`fairshare_runtime::telemetry`]); with export on, each traced entry folded has one too.
//!
//! How the services coordinate, all through `FAIRSHARE_EVENTS`:
//!
//! ```text
//! submission ──JobSubmitted──▶ ┐
//! accounting ──UsageSnapshot─▶ ├─▶ decision (this) ──JobPlaced──▶ launcher ──JobStarted,
//! operators  ──budget, nodes─▶ ┘        ▲                                    JobFinished ──┐
//!                                       └──────────── job ends free GPUs ◀─────────────────┘
//! ```
//!
//! The launcher confirms a placement with `JobStarted` (charging starts then) and reports the
//! end; the preemption service (`PreemptionOrdered`, `JobPreempted`, `JobRequeued`) and
//! cancellations through the submission service move the same jobs; all of them append with
//! the job's newest sequence as the expected one, so writers of one job's events never race.

pub mod audit;
pub mod explain;
pub mod fold;
mod pace;
pub mod publish;
pub mod read;
pub mod rederive;
pub mod usage_age;
pub mod window;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::subjects;
use fairshare_runtime::checkpoint::{CheckpointError, CheckpointStore};
use fairshare_runtime::clock::Clock;
use fairshare_runtime::held_clock::HeldClock;
use fairshare_runtime::lease::{BucketError, Keeper, Lease, RenewError};
use fairshare_runtime::log::{FollowError, Follower, log_position};
use fairshare_runtime::nats::{StreamSetupError, ensure_streams};
use fairshare_runtime::retry::failure_backoff;
use fairshare_runtime::telemetry::{self, Handling, Relation, Role};
use futures::StreamExt;
use tokio::time::Instant;

use crate::domain::{DecisionState, decide};
pub use audit::{
    AuditReport, Divergence, Overcommit, Overcommits, PlacementCheck, PlacementPlan, audit,
    audit_log, overcommits, rederive,
};
pub use explain::{CycleSummary, Explainer, WaitingJob};
pub use fold::{Applied, LogFold};
use pace::Pacer;
use publish::{Outcome, ToPublish};
pub use read::{AuditError, LogExtent, read_again, read_each, read_log, read_twice};

/// The least wait before trying to settle a placement of unknown outcome again (longer after
/// several failed rounds: [`failure_backoff`]).
const SETTLE_RETRY: Duration = Duration::from_secs(1);

/// How long the fold may lag behind the last cycle's placements, with no entry arriving,
/// before it is reported.
const STALL_WARNING: Duration = Duration::from_secs(10);

/// The role part of this service's lease key (`decision.<cluster>`).
pub const LEASE_ROLE: &str = "decision";

/// How long a clean stop waits for its lease to be let go (a successor otherwise waits the
/// lease's ttl out).
const LEASE_RELEASE_WAIT: Duration = Duration::from_secs(2);

/// Format version of this service's checkpoints; bump it when the fold's serde form changes,
/// or what it folds (older checkpoints are then refused and rebuilt from the log). 9: events
/// on a subject they do not belong to are folded as empty. 10: a start stamped before its
/// placement counts from the placement. 11: registered GPUs metered over the hour. 12: owed
/// time under budget trees replaced mid-hour kept. 13: each job's user kept (the queue
/// listing). 14: event times held to a minute after the stream stored them. 15: runs ended
/// since the usage snapshot's window end kept until a snapshot covers them. 16: each run in
/// flight keeps the grace deadline of its order. 17: an hour meter counts a run ordered off
/// until its grace deadline only.
const CHECKPOINT_VERSION: u32 = 17;

/// Tag of this service's checkpoints: names the state, the cluster and the usage window the
/// fold takes snapshots of, so one cluster's checkpoint is never loaded for another (the
/// fold's own cluster is checked as well), nor one folded under another `--window`. (A
/// checkpoint written before the window was named is of another kind: the first start of a
/// build that names it folds the log afresh, once.)
pub fn checkpoint_kind(cluster: &str, usage_window_ms: Option<i64>) -> String {
    match usage_window_ms {
        None => format!("fairshare-decision/LogFold/{cluster}"),
        Some(ms) => format!("fairshare-decision/LogFold/{cluster}/window-{ms}ms"),
    }
}

/// A placement's nodes for its span: `node:gpus,...`.
fn nodes_text(nodes: &[fairshare_events::pb::NodeGpus]) -> String {
    let parts: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}:{}", n.node, n.gpus))
        .collect();
    parts.join(",")
}

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The GPU cluster this instance decides for.
    pub cluster: String,
    /// The least time between the starts of two change-driven cycles (longer after a cycle
    /// that took longer to decide); a change after a quiet spell is decided at once.
    pub debounce: Duration,
    /// A cycle runs at least this often, changes or not.
    pub cycle_every: Duration,
    /// Replicas for streams this service creates (1 on a single server, 3 on a cluster).
    pub stream_replicas: usize,
    /// Where the sled checkpoint lives; `None` keeps none and folds the log from sequence 1
    /// on every start.
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoint after this many applied entries...
    pub checkpoint_every_events: u64,
    /// ...or this long after the last checkpoint, whichever comes first.
    pub checkpoint_every: Duration,
    /// The accounting service's window: usage snapshots of another are refused (`None`: any
    /// window).
    pub usage_window_ms: Option<i64>,
}

impl Config {
    /// Defaults (2 ms debounce, a cycle at least every 5 s, no checkpoint; with one, every
    /// 10,000 entries or 5 s) for cluster `cluster`.
    pub fn new(cluster: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            debounce: Duration::from_millis(2),
            cycle_every: Duration::from_secs(5),
            stream_replicas: 1,
            checkpoint_dir: None,
            checkpoint_every_events: 10_000,
            checkpoint_every: Duration::from_secs(5),
            usage_window_ms: None,
        }
    }
}

/// Why the service stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The cluster name cannot be a subject token.
    #[error("invalid cluster name {0:?}: use letters, digits, '-' and '_'")]
    InvalidCluster(String),
    /// The streams could not be created or updated.
    #[error(transparent)]
    Streams(#[from] StreamSetupError),
    /// The log could not be followed.
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// The log follower stopped (connection closed).
    #[error("the log follower stopped: {0}")]
    FollowerStopped(String),
    /// The explain or queue API could not be subscribed.
    #[error("cannot subscribe to explain and queue requests: {0}")]
    Subscribe(String),
    /// The checkpoint store could not be opened (e.g. another instance holds it).
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The lease bucket could not be opened or made.
    #[error(transparent)]
    LeaseBucket(#[from] BucketError),
    /// Another instance took this cluster's lease: this one stopped deciding.
    #[error("stopped: {0}")]
    LeaseLost(RenewError),
    /// Cut off from NATS with placements of unknown outcome once the lease stopped holding:
    /// they may wait in the client's buffer, to land after a successor took the lease and gave
    /// their GPUs away ([`fairshare_runtime::disconnect::cut_off_unheld`]).
    #[error(
        "stopped: cut off from NATS with placements of unknown outcome after the lease stopped \
         holding; stopping drops them from the client's buffer before another instance may \
         take the lease (restarted, this instance stands by and waits the lease out)"
    )]
    CutOff,
}

/// A started service: its fold is at the log's end as of start-up.
pub struct Service {
    config: Config,
    /// For explain and queue replies.
    client: async_nats::Client,
    /// `fairshare.api.explain.<cluster>` and `fairshare.api.queue.<cluster>` requests, as one
    /// stream: both are answered the same way, by deciding afresh on the current state.
    explain_requests: futures::stream::Select<async_nats::Subscriber, async_nats::Subscriber>,
    js: jetstream::Context,
    events: jetstream::stream::Stream,
    follower: Follower,
    fold: LogFold,
    /// "Now": the host's clock held to the log's time, never before its newest entry (a host
    /// clock set back would decide in the past: admit work beside a maintenance window as
    /// though the window were further off, and the window then cuts the job inside its
    /// minimum runtime) nor more than a minute past it.
    now: HeldClock,
    board: explain::Publisher,
    next_cycle: u64,
    /// Whether the usage snapshots the ranking starts from still arrive (warned once per
    /// spell without).
    usage_age: usage_age::UsageAge,
    /// Placements whose outcome the next cycle must know first (see [`publish::settle`]).
    unresolved: Vec<publish::Unresolved>,
    /// Cycles with a placement of unknown outcome, and failed rounds of settling them, since
    /// the last cycle whose placements were all answered: each waits longer before the next
    /// try ([`failure_backoff`]), so a server that refuses every write (a full disk) is not
    /// asked again back to back, with a warning per job per cycle.
    failed_cycles: u32,
    /// The sled checkpoint, if configured.
    store: Option<CheckpointStore>,
    /// This cluster's decision lease: cycles run only while this instance holds it, so a
    /// second instance for the cluster folds the log as a standby instead of deciding beside
    /// the first ([`fairshare_runtime::lease`]). Kept by its own task.
    lease: Keeper,
    /// The sequence the newest checkpoint holds (0: none).
    checkpointed: u64,
    /// When the stream stored the last entry the fold applied (what a checkpoint of it names,
    /// so that a resume can tell the log it was folded from from one rolled back and written
    /// anew; `None` if unknown).
    last_stored_ms: Option<i64>,
    /// Entries applied since the last checkpoint attempt.
    since_checkpoint: u64,
    /// The checkpoint sequence this start resumed from (0: folded from the beginning).
    resumed_from: u64,
}

impl Service {
    /// Sets up streams and folds the cluster's log to its current end.
    pub async fn start(
        client: async_nats::Client,
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ServiceError> {
        if !subjects::is_valid_token(&config.cluster) {
            return Err(ServiceError::InvalidCluster(config.cluster));
        }
        let js = jetstream::new(client.clone());
        ensure_streams(&js, config.stream_replicas).await?;
        let events = js
            .get_stream(EVENTS_STREAM)
            .await
            .map_err(|e| FollowError::Stream(e.to_string()))?;
        let log = log_position(&js).await?;
        let store = match &config.checkpoint_dir {
            Some(dir) => Some(CheckpointStore::open(
                dir,
                &log.checkpoint_kind(&checkpoint_kind(&config.cluster, config.usage_window_ms)),
                CHECKPOINT_VERSION,
            )?),
            None => None,
        };
        let lease = Lease::for_service(
            &js,
            LEASE_ROLE,
            &config.cluster,
            store.as_ref(),
            config.checkpoint_dir.as_deref(),
            config.stream_replicas,
        )
        .await?;
        let started = std::time::Instant::now();
        let resumed = match &store {
            Some(s) => {
                s.resume_on_log::<LogFold>(&config.cluster, log.end, &js)
                    .await
            }
            None => None,
        };
        let (mut fold, mut last_stored_ms) = match resumed {
            Some((mut resumed, stored_ms)) => {
                resumed.set_usage_window_ms(config.usage_window_ms);
                (resumed, stored_ms)
            }
            None => (
                LogFold::with_usage_window(&config.cluster, config.usage_window_ms),
                None,
            ),
        };
        let resumed_from = fold.last_applied();
        let mut follower = Follower::start(
            &js,
            resumed_from + 1,
            vec![subjects::cluster_events(&config.cluster)],
        )
        .await?;
        follower.resuming_after(last_stored_ms);
        follower.expect_log(&log)?;
        let mut now = HeldClock::new(
            clock,
            "no work is admitted beside a maintenance window as though the window were further off",
        );
        let mut refused = window::RefusedWindows::default();
        let applied = follower
            .catch_up(|entry| {
                let _span = telemetry::entry_span("decision", &entry, Relation::Linked);
                entry.report_if_undecodable();
                now.observe(&entry);
                if let Applied::Ignored(why) = fold.apply(&entry) {
                    refused.note(entry.sequence, &why);
                }
                if fold.last_applied() == entry.sequence {
                    last_stored_ms = entry.stored_ms;
                }
            })
            .await?;
        refused.report("decision");
        // Should the server's time not be read, the newest entry does not stand for the log's
        // time: on a quiet cluster it may be hours old, and "now" would be held that far back.
        now.caught_up_with(&js, false).await;
        tracing::info!(
            cluster = config.cluster,
            resumed_from,
            applied,
            last_sequence = fold.last_applied(),
            queued = fold.state().queued_len(),
            last_cycle = fold.last_cycle(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "log folded; deciding"
        );
        let next_cycle = fold.last_cycle().saturating_add(1);
        let explain = client
            .subscribe(subjects::explain_api(&config.cluster))
            .await
            .map_err(|e| ServiceError::Subscribe(e.to_string()))?;
        let queue = client
            .subscribe(subjects::queue_api(&config.cluster))
            .await
            .map_err(|e| ServiceError::Subscribe(e.to_string()))?;
        let explain_requests = futures::stream::select(explain, queue);
        // Served from here on: a caller that sees `start` return may ask at once.
        fairshare_runtime::log::settle_subscriptions(&client)
            .await
            .map_err(|e| ServiceError::Subscribe(e.to_string()))?;
        let mut service = Self {
            client,
            explain_requests,
            config,
            js,
            events,
            follower,
            fold,
            now,
            board: explain::Publisher::new(),
            next_cycle,
            usage_age: usage_age::UsageAge::default(),
            unresolved: Vec::new(),
            failed_cycles: 0,
            store,
            lease: Keeper::spawn(lease),
            checkpointed: resumed_from,
            last_stored_ms,
            since_checkpoint: 0,
            resumed_from,
        };
        // A long catch-up is not repeated after a crash before the first timed checkpoint.
        service.checkpoint();
        Ok(service)
    }

    /// The checkpoint sequence this start resumed from; 0 when it folded from the beginning
    /// (no checkpoint configured, none written yet, or one that could not be used).
    pub fn resumed_from(&self) -> u64 {
        self.resumed_from
    }

    /// The fold (as of start-up until [`Service::serve`] takes over).
    pub fn fold(&self) -> &LogFold {
        &self.fold
    }

    /// Writes the fold to the checkpoint store if it moved since the last one. A failed write
    /// is reported and otherwise ignored: the checkpoint is only a cache, and the next attempt
    /// writes the then current fold.
    fn checkpoint(&mut self) {
        self.since_checkpoint = 0;
        let Some(store) = &self.store else {
            return;
        };
        let sequence = self.fold.last_applied();
        if sequence <= self.checkpointed {
            return;
        }
        let started = std::time::Instant::now();
        match store.save_at(sequence, self.last_stored_ms, &self.fold) {
            Ok(()) => {
                self.checkpointed = sequence;
                tracing::debug!(
                    sequence,
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "checkpoint written"
                );
            }
            Err(e) => tracing::warn!(sequence, "checkpoint not written: {e}"),
        }
    }

    /// The folded state (as of start-up until [`Service::serve`] takes over).
    pub fn state(&self) -> &DecisionState {
        self.fold.state()
    }

    /// A reader of each cycle's waiting reasons; keeps working while the service serves.
    pub fn explainer(&self) -> Explainer {
        self.board.explainer()
    }

    /// Folds and decides until `shutdown` completes, then writes a last checkpoint and returns
    /// the fold.
    pub async fn serve(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<LogFold, ServiceError> {
        let mut pacer = Pacer::new(
            Instant::now(),
            self.config.debounce,
            self.config.cycle_every,
        );
        // `interval` refuses a zero period.
        let mut checkpoint_timer =
            tokio::time::interval(self.config.checkpoint_every.max(Duration::from_millis(1)));
        checkpoint_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Times the lease was taken, as last seen.
        let mut lease_taken = 0;
        // Placements of unknown outcome are settled before anything is decided.
        if !self.unresolved.is_empty() {
            pacer.block(Instant::now());
        }
        // While placements of unknown outcome wait: is the client cut off past the lease?
        let mut cut_off_check = tokio::time::interval(Duration::from_millis(250));
        cut_off_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        let result = loop {
            let due = pacer.due(self.fold.last_applied());
            let wake = async move {
                match due {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            // Biased: a due cycle runs even while entries keep arriving (they cannot starve
            // it); the barrier in `due` keeps it from running on a state that misses the
            // previous cycle's placements.
            tokio::select! {
                biased;
                () = &mut shutdown => break Ok(()),
                // Before the log: a follower retrying while cut off must not starve it.
                _ = cut_off_check.tick(), if !self.unresolved.is_empty() => {
                    let hold = self.lease.hold_watch();
                    if fairshare_runtime::disconnect::is_cut_off_unheld(&self.client, &hold) {
                        break Err(ServiceError::CutOff);
                    }
                }
                view = self.lease.changed() => {
                    if let Some(e) = view.lost {
                        break Err(ServiceError::LeaseLost(e));
                    }
                    if view.taken > lease_taken {
                        // The first cycle waits until the fold holds the cluster's log as of
                        // the taking: the previous holder's last placements among it.
                        lease_taken = view.taken;
                        pacer.raise_barrier(view.log_end);
                        pacer.changed(Instant::now());
                    }
                }
                // Only the lease's holder decides (or settles what it decided); a lapsed lease
                // waits for the next renewal.
                () = wake, if self.lease.holds(Instant::now()) => {
                    // Looked at again: the wake may have come a while after the loop armed it.
                    if !self.lease.holds(Instant::now()) {
                        continue;
                    }
                    if pacer.blocked() {
                        // Placements sent again while cut off wait in the client's buffer: once
                        // the lease stops holding, the service stops rather than let them land
                        // after a successor decided without them.
                        let cut_off = fairshare_runtime::disconnect::cut_off_unheld(
                            self.client.clone(),
                            self.lease.hold_watch(),
                        );
                        let unsettled = !self.unresolved.is_empty();
                        let settled = tokio::select! {
                            biased;
                            () = self.resolve(&mut pacer) => true,
                            () = cut_off, if unsettled => false,
                        };
                        if !settled {
                            break Err(ServiceError::CutOff);
                        }
                        continue;
                    }
                    let started = Instant::now();
                    let Some((outcome, deciding)) = self.cycle().await else {
                        break Err(ServiceError::CutOff);
                    };
                    pacer.ran(started, Instant::now(), outcome.max_sequence, deciding);
                    if outcome.fenced || outcome.withheld > 0 {
                        // Decided again once the barrier (the newer node event) is folded,
                        // even if the fold ignores that event and so marks nothing changed;
                        // placements withheld are decided again, too.
                        pacer.changed(Instant::now());
                    }
                    let wait = if outcome.failed.is_empty() && !outcome.fence_unread {
                        self.failed_cycles = 0;
                        Duration::ZERO
                    } else {
                        let wait = failure_backoff(self.failed_cycles);
                        self.failed_cycles = self.failed_cycles.saturating_add(1);
                        wait
                    };
                    self.unresolved = outcome
                        .failed
                        .into_iter()
                        .map(|p| publish::Unresolved::Unanswered(Box::new(p)))
                        .chain(outcome.moved.into_iter().map(publish::Unresolved::Moved))
                        .collect();
                    // (A cycle whose fence could not be read waits out the same pause, then
                    // decides again: settling nothing lifts the block.)
                    if !self.unresolved.is_empty() || outcome.fence_unread {
                        pacer.block(Instant::now() + wait);
                        // Decide again once resolved: the placement may not have landed.
                        pacer.changed(Instant::now());
                    }
                }
                entry = self.follower.next() => match entry {
                    Some(Ok(entry)) => {
                        let _span = telemetry::entry_span("decision", &entry, Relation::Child);
                        entry.report_if_undecodable();
                        self.now.observe(&entry);
                        match self.fold.apply(&entry) {
                            Applied::Changed => pacer.changed(Instant::now()),
                            Applied::Placed => {}
                            Applied::Ignored(why) => {
                                window::log_refusal(entry.sequence, &entry.subject, &why);
                            }
                        }
                        if self.fold.last_applied() == entry.sequence {
                            self.last_stored_ms = entry.stored_ms;
                        }
                        self.since_checkpoint += 1;
                        if self.since_checkpoint >= self.config.checkpoint_every_events {
                            self.checkpoint();
                        }
                    }
                    // Another log now: the fold describes none of it.
                    Some(Err(e)) if e.ends_following() => break Err(e.into()),
                    // The follower makes a new consumer after a gap; report and go on.
                    Some(Err(e)) => tracing::warn!("log follower: {e}"),
                    None => break Err(ServiceError::FollowerStopped("connection closed".into())),
                },
                // Before explains: a steady stream of them (each a whole decide) must not put
                // the timed checkpoint off.
                _ = checkpoint_timer.tick(), if self.store.is_some() => self.checkpoint(),
                // After the log: folding an entry takes microseconds, answering an explain a
                // whole decide(), so explains polled first could keep the fold, and with it
                // every cycle, waiting for as long as they keep coming.
                Some(message) = self.explain_requests.next() => {
                    // Every instance hears the request and the caller takes the first answer:
                    // a standby's fold may lag the holder's (a job just placed shown as
                    // queued, one just submitted as unknown), so the holder answers. One that
                    // has seen no holder (just started, or the holder's lease ran out) answers
                    // rather than leave the caller without one.
                    if self.lease.standing_by(Instant::now()) {
                        continue;
                    }
                    // Computed synchronously: no borrow of the service is held across the send.
                    let now = self.now_ms();
                    if let Some((reply_to, reply)) = self.explain_reply(&message, now) {
                        let client = self.client.clone();
                        if let Err(e) = client.publish(reply_to, reply).await {
                            tracing::warn!("could not send explain reply: {e}");
                        }
                    }
                }
                () = tokio::time::sleep(STALL_WARNING), if pacer.behind(self.fold.last_applied()) => {
                    tracing::warn!(
                        last_applied = self.fold.last_applied(),
                        "no cycle for {STALL_WARNING:?}: the log has not delivered the last cycle's placements yet"
                    );
                }
            }
        };
        // Whatever stopped the loop, the fold is a prefix of the log and safe to keep.
        self.checkpoint();
        let cut_off = matches!(result, Err(ServiceError::CutOff));
        if self.unresolved.is_empty() && !cut_off {
            // A successor need not wait the lease out.
            self.lease.release(LEASE_RELEASE_WAIT).await;
        } else {
            // Placements of unknown outcome may still land (a client buffer, the stream's
            // replication): a successor taking the lease now would read a log without them
            // and could give their GPUs away again. The lease runs out instead, as in a crash,
            // and this directory's next start is another instance, which waits for that too
            // (a restart under the same name would take the lease back at once).
            tracing::warn!(
                unresolved = self.unresolved.len(),
                "stopping with placements of unknown outcome: the lease is left to run out"
            );
            if let Some(store) = &self.store
                && let Err(e) = store.forget_instance_token()
            {
                tracing::warn!("cannot make the next start wait for the lease: {e}");
            }
        }
        tracing::info!(
            cluster = self.config.cluster,
            last_cycle = self.next_cycle.saturating_sub(1),
            last_sequence = self.fold.last_applied(),
            checkpointed = self.checkpointed,
            "decision service stopped"
        );
        result.map(|()| self.fold)
    }

    /// Settles the placements the last cycle could not ([`publish::settle`]); raises the
    /// barrier to what each one found.
    async fn resolve(&mut self, pacer: &mut Pacer) {
        // A pause with nothing to settle (after a cycle whose fence could not be read): over.
        if self.unresolved.is_empty() {
            pacer.unblock();
            return;
        }
        let mut still = Vec::new();
        // All at once: one at a time, a cycle of hundreds of placements whose acknowledgements
        // timed out would keep the loop (and shutdown) waiting a request timeout per job.
        let now_ms = self.now_ms();
        let (js, events, cluster) = (&self.js, &self.events, self.config.cluster.as_str());
        let nodes_newest = &publish::newest_inventory_change(events, cluster).await;
        let settled =
            futures::future::join_all(std::mem::take(&mut self.unresolved).into_iter().map(
                |unresolved| async move {
                    let settled =
                        publish::settle(js, events, cluster, nodes_newest, &unresolved, now_ms)
                            .await;
                    (unresolved, settled)
                },
            ))
            .await;
        for (unresolved, settled) in settled {
            match settled {
                publish::Settled::At(sequence) => pacer.raise_barrier(sequence),
                publish::Settled::Unknown(e) => {
                    tracing::warn!(
                        job_id = unresolved.job_id(),
                        "cannot settle the outcome of a placement: {e}"
                    );
                    still.push(unresolved);
                }
            }
        }
        if still.is_empty() {
            pacer.unblock();
        } else {
            self.unresolved = still;
            // Each failed round of settling waits longer, as failed cycles do.
            let wait = failure_backoff(self.failed_cycles).max(SETTLE_RETRY);
            self.failed_cycles = self.failed_cycles.saturating_add(1);
            pacer.block(Instant::now() + wait);
        }
    }

    /// The reply to one explain or queue request, from the current state (`None`: nobody to
    /// reply to).
    fn explain_reply(
        &self,
        message: &async_nats::Message,
        now_ms: i64,
    ) -> Option<(async_nats::Subject, bytes::Bytes)> {
        use fairshare_events::{codec, pb};
        let reply_to = fairshare_runtime::reply::inbox_or_warn(message)?;
        if *message.subject == *subjects::queue_api(&self.config.cluster) {
            return Some((
                reply_to,
                codec::encode(&self.queue_reply(&message.payload, now_ms)),
            ));
        }
        let result = match codec::decode_explain_request(&message.payload) {
            Ok(request) => crate::domain::explain(self.fold.state(), &request.job_id, now_ms),
            Err(e) => Err(pb::Rejection {
                code: pb::RejectionCode::Malformed as i32,
                message: e.to_string(),
            }),
        };
        let reply = pb::ExplainReply {
            result: Some(match result {
                Ok(e) => pb::explain_reply::Result::Explanation(e),
                Err(r) => pb::explain_reply::Result::Rejected(r),
            }),
        };
        Some((reply_to, codec::encode(&reply)))
    }

    /// The reply to one queue listing request, from the current state.
    fn queue_reply(&self, payload: &[u8], now_ms: i64) -> fairshare_events::pb::QueueReply {
        use fairshare_events::{codec, pb};
        let result = match codec::decode_queue_request(payload) {
            Ok(request) => crate::domain::listing(self.fold.state(), &request, now_ms),
            Err(e) => Err(pb::Rejection {
                code: pb::RejectionCode::Malformed as i32,
                message: e.to_string(),
            }),
        };
        let mut reply = pb::QueueReply {
            result: Some(match result {
                Ok(listing) => pb::queue_reply::Result::Listing(listing),
                Err(r) => pb::queue_reply::Result::Rejected(r),
            }),
        };
        // Room for the reply's own framing beside the listing.
        let max = self.client.server_info().max_payload.saturating_sub(64);
        let cut = crate::domain::listing::fit_reply(&mut reply, max);
        if cut > 0 {
            tracing::info!(cut, max, "queue listing cut to the server's payload limit");
        }
        reply
    }

    /// "Now" for the domain: the clock's, held to the log's time ([`HeldClock`]).
    fn now_ms(&mut self) -> i64 {
        self.now.now_ms()
    }

    /// Runs one cycle: what became of its placements, and how long deciding took (without
    /// publishing); `None` if the client was cut off past the lease's hold while publishing
    /// ([`ServiceError::CutOff`]).
    async fn cycle(&mut self) -> Option<(Outcome, Duration)> {
        let cycle = self
            .next_cycle
            .max(self.fold.last_cycle().saturating_add(1));
        self.next_cycle = cycle.saturating_add(1);
        // The server's time read again when due (a start that could not read it tries at most
        // every 30 s).
        self.now.refresh_anchor(&self.js).await;
        let now_ms = self.now_ms();
        self.usage_age.check(self.fold.state(), now_ms, "decision");
        let started = std::time::Instant::now();
        // One span per placement, open until its acknowledgement: a child of the job's
        // submission, and the parent of the launcher's start.
        let mut spans = Vec::new();
        let (batch, through_sequence, waiting) = {
            let decision = decide(self.fold.state(), now_ms);
            self.board.publish(&decision, cycle);
            let mut batch = Vec::with_capacity(decision.placements.len());
            let cycle_text = cycle.to_string();
            for event in decision.events(cycle) {
                let Some(fairshare_events::pb::event::Body::JobPlaced(p)) = &event.body else {
                    continue;
                };
                match self.fold.job_sequence(&p.job_id) {
                    Some(expected) => {
                        // The attribute is only read by an exporter: no string per placement
                        // without one.
                        let nodes = if telemetry::exporting() {
                            nodes_text(&p.nodes)
                        } else {
                            String::new()
                        };
                        let span = Handling::start(
                            "decision place",
                            Role::Publish,
                            self.fold.job_trace(&p.job_id),
                            Relation::Child,
                            &[
                                ("fairshare.job_id", &p.job_id),
                                ("fairshare.cycle", &cycle_text),
                                ("fairshare.nodes", &nodes),
                            ],
                        );
                        batch.push(ToPublish {
                            job_id: p.job_id.clone(),
                            expected,
                            decided_through: decision.through_sequence,
                            trace: span.hand_on(),
                            event,
                        });
                        spans.push(span);
                    }
                    // Only if its submission came on a foreign subject: it cannot be placed
                    // safely, so it is not placed at all.
                    None => {
                        tracing::warn!(
                            job_id = p.job_id,
                            "queued job without a job subject, not placed"
                        )
                    }
                }
            }
            (batch, decision.through_sequence, decision.waiting.len())
        };
        let deciding = started.elapsed();
        let decided_us = deciding.as_micros() as u64;
        let placements = batch.len();
        let outcome = if batch.is_empty() {
            Outcome::default()
        } else {
            match publish::newest_inventory_change(&self.events, &self.config.cluster).await {
                // A node event the fold has not reached: decide again once it has (the
                // barrier holds the next cycle until then; the event itself marks the state
                // changed). What is left is the moment between this look and the publish.
                Ok(newest) if newest > through_sequence => {
                    tracing::debug!(
                        cycle,
                        through_sequence,
                        newest,
                        "nodes changed since the state this cycle decided from; not published"
                    );
                    for span in &mut spans {
                        span.fail("nodes changed since the decision; decided again");
                    }
                    Outcome {
                        max_sequence: newest,
                        fenced: true,
                        ..Outcome::default()
                    }
                }
                Ok(_) => {
                    let lease = &self.lease;
                    let leading = || lease.holds(Instant::now());
                    // Placements sent while cut off wait in the client's buffer: once the
                    // lease stops holding, the service stops rather than let them land after
                    // a successor decided without them (the reads before sent nothing).
                    let cut_off = fairshare_runtime::disconnect::cut_off_unheld(
                        self.client.clone(),
                        lease.hold_watch(),
                    );
                    let published = tokio::select! {
                        biased;
                        outcome = publish::publish(&self.js, &self.config.cluster, batch, leading) => Some(outcome),
                        () = cut_off => None,
                    };
                    published?
                }
                // Unfenced, a placement could land on a node cordoned, removed or shrunk since
                // the state was read (the lookup can fail, an API queue full or a leader being
                // elected, while plain publishes go through). Nothing is published; the cycle
                // is decided again after a pause, as after a failed one.
                Err(e) => {
                    tracing::warn!(
                        cycle,
                        "cannot read the newest node event; nothing published, deciding again: {e}"
                    );
                    for span in &mut spans {
                        span.fail("the newest node event could not be read; decided again");
                    }
                    Outcome {
                        fence_unread: true,
                        ..Outcome::default()
                    }
                }
            }
        };
        // The placements withheld are the batch's last, as their spans are.
        let withheld_from = spans.len().saturating_sub(outcome.withheld);
        for span in &mut spans[withheld_from..] {
            span.fail(
                "not sent: an earlier chunk went unanswered, the lease stopped holding, or the \
                 nodes changed while earlier chunks were sent",
            );
        }
        drop(spans);
        tracing::debug!(
            cycle,
            through_sequence,
            placements,
            landed = outcome.landed,
            duplicates = outcome.duplicates,
            refused = outcome.moved.len(),
            failed = outcome.failed.len(),
            withheld = outcome.withheld,
            waiting,
            decided_us,
            published_us = started.elapsed().as_micros() as u64 - decided_us,
            "cycle"
        );
        Some((outcome, deciding))
    }
}

/// Starts the service on `client` and serves until `shutdown` completes.
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
    #![allow(clippy::unwrap_used)]

    use fairshare_events::pb::{self, event::Body};
    use fairshare_runtime::log::LogEntry;

    use super::*;

    /// Waits until `service` holds its lease (10 s at most).
    async fn until_leading(service: &Service) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !service.lease.holds(Instant::now()) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the lease is taken");
    }

    fn fold_of(cluster: &str) -> LogFold {
        let mut fold = LogFold::new(cluster);
        fold.apply(&LogEntry {
            sequence: 4,
            subject: subjects::node(cluster, "n1"),
            event: Ok(pb::Event {
                at_ms: 1,
                body: Some(Body::NodeRegistered(pb::NodeRegistered {
                    cluster: cluster.into(),
                    node: "n1".into(),
                    gpus: 8,
                })),
            }),
            pending: 0,
            trace: None,
            stored_ms: None,
        });
        fold
    }

    /// A cordon that lands after the state a cycle decided from, before the fold has it: the
    /// cycle's placement onto that node is not published, and the next cycle waits for the
    /// fold to reach the cordon.
    #[tokio::test]
    async fn a_cycle_does_not_place_onto_a_node_changed_since_its_state() {
        use fairshare_events::codec;
        use fairshare_runtime::clock::SystemClock;

        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server.jetstream(Duration::from_secs(5)).await.unwrap();
        let append = |subject: String, body: Body| {
            let js = js.clone();
            async move {
                let event = pb::Event {
                    at_ms: 1,
                    body: Some(body),
                };
                js.publish(subject, codec::encode(&event))
                    .await
                    .unwrap()
                    .await
                    .unwrap()
                    .sequence
            }
        };
        use fairshare_testkit::events::{node_registered, one_allocation_tree, one_gpu_submitted};
        append(subjects::policy("c"), one_allocation_tree("c", "a")).await;
        append(subjects::node("c", "n1"), node_registered("c", "n1", 8)).await;
        append(
            subjects::job_event("c", "j1", "job_submitted"),
            one_gpu_submitted("c", "a", "j1", "k1"),
        )
        .await;
        let client = async_nats::connect(server.url()).await.unwrap();
        let mut service = Service::start(client, Config::new("c"), Arc::new(SystemClock))
            .await
            .unwrap();
        assert!(service.state().job("j1").is_some(), "folded at start");
        let cordon = append(
            subjects::node("c", "n1"),
            Body::NodeCordoned(pb::NodeCordoned {
                cluster: "c".into(),
                node: "n1".into(),
                reason: "fan".into(),
            }),
        )
        .await;

        let (outcome, _) = service.cycle().await.expect("not cut off");
        assert_eq!(outcome.landed, 0, "{outcome:?}");
        assert_eq!(
            outcome.max_sequence, cordon,
            "the next cycle waits for the cordon"
        );
        let events = js.get_stream(EVENTS_STREAM).await.unwrap();
        assert_eq!(
            publish::newest_of_job(&events, "c", "j1").await.unwrap(),
            cordon - 1,
            "nothing was written for the job"
        );
    }

    /// A clean stop lets the lease go at once, unless placements of unknown outcome are
    /// still to settle: those may yet land, and a successor taking over at once would read a
    /// log without them and could give their GPUs to other jobs. It then runs out, as after
    /// a crash.
    #[tokio::test]
    async fn a_stop_with_placements_of_unknown_outcome_leaves_the_lease_to_run_out() {
        use fairshare_runtime::clock::SystemClock;
        use fairshare_runtime::lease::Attempt;

        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server.jetstream(Duration::from_secs(5)).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let start = || {
            let url = server.url();
            let mut config = Config::new("c");
            config.checkpoint_dir = Some(dir.path().join("store"));
            async move {
                let client = async_nats::connect(url).await.unwrap();
                Service::start(client, config, Arc::new(SystemClock))
                    .await
                    .unwrap()
            }
        };
        let stop_holding = |unresolved: Vec<publish::Unresolved>| {
            let started = start();
            async move {
                let mut service = started.await;
                until_leading(&service).await;
                service.unresolved = unresolved;
                service.serve(std::future::ready(())).await.unwrap();
            }
        };
        let successor = || {
            Lease::open_with_ttl(
                &js,
                LEASE_ROLE,
                "c",
                "next".to_owned(),
                1,
                LEASE_TTL_FOR_TEST,
            )
        };

        // Nothing unsettled: let go, and taken at once.
        stop_holding(Vec::new()).await;
        let mut next = successor().await.unwrap();
        assert_eq!(next.try_take().await, Attempt::Taken);
        next.release().await;

        // A placement whose outcome is unknown: still held when the service has stopped.
        stop_holding(vec![publish::Unresolved::Moved("j1".into())]).await;
        let mut next = successor().await.unwrap();
        assert!(
            matches!(next.try_take().await, Attempt::HeldBy(_)),
            "the lease was let go with a placement unsettled"
        );
        // Started again on the same checkpoint directory, it is another instance now: it
        // stands by too, where a restart after a clean stop or a crash takes its lease back.
        let restarted = start().await;
        tokio::time::timeout(Duration::from_secs(10), async {
            while !restarted.lease.standing_by(Instant::now()) {
                assert!(
                    !restarted.lease.holds(Instant::now()),
                    "a restart took back the lease of a stop with placements unsettled"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the restart stands by");
    }

    /// Cut off from NATS with a placement of unknown outcome, the service stops once its lease
    /// stops holding: the placement may wait in the client's buffer, to land after a successor
    /// took the lease and gave its GPUs away. Cut off with nothing unsettled, it waits for the
    /// server as long as it takes.
    #[tokio::test]
    async fn cut_off_with_a_placement_unsettled_it_stops_once_the_lease_stops_holding() {
        use fairshare_runtime::clock::SystemClock;
        let cut_off = |unresolved: Vec<publish::Unresolved>, within: Duration| async move {
            let mut server = fairshare_testkit::NatsServer::start().unwrap();
            let client = async_nats::connect(server.url()).await.unwrap();
            let mut service = Service::start(client, Config::new("c"), Arc::new(SystemClock))
                .await
                .unwrap();
            until_leading(&service).await;
            service.unresolved = unresolved;
            server.kill();
            let killed = Instant::now();
            let served = service.serve(std::future::pending());
            let stopped = tokio::time::timeout(within, served).await.ok();
            (stopped, killed.elapsed())
        };
        let (unsettled, settled) = tokio::join!(
            cut_off(
                vec![publish::Unresolved::Moved("j1".into())],
                LEASE_TTL_FOR_TEST
            ),
            cut_off(Vec::new(), LEASE_TTL_FOR_TEST),
        );
        let (stopped, after) = unsettled;
        assert!(
            matches!(stopped, Some(Err(ServiceError::CutOff))),
            "{stopped:?}"
        );
        // Not before the lease stopped holding: two thirds of its ttl after the last renewal,
        // which came at most a fifth of the ttl before the server went.
        assert!(
            after >= LEASE_TTL_FOR_TEST * 2 / 3 - LEASE_TTL_FOR_TEST / 5,
            "{after:?}"
        );
        assert!(settled.0.is_none(), "{:?}", settled.0);
    }

    /// Cut off with a job to place and nothing sent, the service waits for the server, however
    /// long: each cycle's look at the newest node event fails and nothing is published, so
    /// nothing can land late. Once the server is back, the job is placed.
    #[tokio::test]
    async fn cut_off_with_a_job_to_place_it_waits_for_the_server() {
        use fairshare_runtime::clock::{Clock, SystemClock};
        use fairshare_testkit::events::{
            append, node_registered, one_allocation_tree, one_gpu_submitted,
        };
        let mut server = fairshare_testkit::NatsServer::start().unwrap();
        let client = async_nats::connect(server.url()).await.unwrap();
        let mut config = Config::new("c");
        // The cycle after the entries comes 2 s after the first (empty) one: after the cut.
        config.debounce = Duration::from_secs(2);
        let service = Service::start(client, config, Arc::new(SystemClock))
            .await
            .unwrap();
        until_leading(&service).await;
        let (stop, serving) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(service.serve(async {
            let _ = serving.await;
        }));
        // The first cycle runs at once, on an empty cluster; the next not before 2 s.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let js = server.jetstream(Duration::from_secs(5)).await.unwrap();
        let now = SystemClock.now_ms();
        let tree = one_allocation_tree("c", "a");
        append(&js, subjects::policy("c"), now, tree).await;
        let node = node_registered("c", "n1", 8);
        append(&js, subjects::node("c", "n1"), now, node).await;
        let submitted = one_gpu_submitted("c", "a", "j1", "k1");
        let subject = subjects::job_event("c", "j1", "job_submitted");
        append(&js, subject, now, submitted).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.kill();
        let killed_ms = SystemClock.now_ms();
        tokio::time::sleep(LEASE_TTL_FOR_TEST).await;
        assert!(
            !serving.is_finished(),
            "stopped while cut off with nothing sent"
        );
        server.restart().unwrap();
        let js = server.jetstream(Duration::from_secs(5)).await.unwrap();
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let placed = fairshare_testkit::events::stored(&js)
                    .await
                    .into_iter()
                    .find(|e| e.subject == subjects::job_event("c", "j1", "job_placed"));
                if let Some(placed) = placed {
                    // Decided after the cut: the cycles while cut off sent nothing.
                    assert!(placed.event.at_ms > killed_ms, "placed before the cut");
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("j1 placed once the server is back");
        let _ = stop.send(());
        serving.await.unwrap().unwrap();
    }

    /// Every instance hears an explain request; only the lease's holder answers it, so the
    /// caller never takes a standby's answer from a fold that may lag.
    #[tokio::test]
    async fn only_the_lease_holder_answers_explain_requests() {
        use fairshare_events::codec;
        use fairshare_runtime::clock::SystemClock;
        use futures::StreamExt;

        let server = fairshare_testkit::NatsServer::start().unwrap();
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let mut services = Vec::new();
        for dir in &dirs {
            let client = async_nats::connect(server.url()).await.unwrap();
            let mut config = Config::new("c");
            config.checkpoint_dir = Some(dir.path().join("store"));
            let service = Service::start(client, config, Arc::new(SystemClock))
                .await
                .unwrap();
            // The first takes the lease before the second starts.
            tokio::time::timeout(Duration::from_secs(10), async {
                while !service.lease.holds(Instant::now())
                    && !service.lease.standing_by(Instant::now())
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("the lease is taken or seen held");
            services.push(service);
        }
        assert!(services[0].lease.holds(Instant::now()));
        assert!(services[1].lease.standing_by(Instant::now()));
        let mut stops = Vec::new();
        let mut serving = Vec::new();
        for service in services {
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            stops.push(stop);
            serving.push(tokio::spawn(service.serve(async move {
                let _ = stopped.await;
            })));
        }

        let client = async_nats::connect(server.url()).await.unwrap();
        let inbox = client.new_inbox();
        let mut replies = client.subscribe(inbox.clone()).await.unwrap();
        let request = codec::encode(&pb::ExplainRequest {
            job_id: "nobody".into(),
        });
        client
            .publish_with_reply(subjects::explain_api("c"), inbox, request)
            .await
            .unwrap();
        let mut answers = 0;
        while let Ok(Some(_)) =
            tokio::time::timeout(Duration::from_millis(500), replies.next()).await
        {
            answers += 1;
        }
        assert_eq!(answers, 1, "one answer, the holder's");

        for stop in stops {
            let _ = stop.send(());
        }
        for s in serving {
            s.await.unwrap().unwrap();
        }
    }

    /// The ttl a test's own lease handle asks for (the bucket the service made keeps its own).
    const LEASE_TTL_FOR_TEST: Duration = Duration::from_secs(15);

    /// A checkpoint names when the stream stored the entry it was folded through; a start
    /// resumes it only while the log still holds that entry there. One whose entry the log
    /// holds stored at another time (a log restored from a backup, or a server that lost its
    /// newest entries and took new ones under their sequences, which keeps the stream's
    /// creation time) is rebuilt from the log.
    #[tokio::test]
    async fn a_checkpoint_is_resumed_only_while_the_log_holds_the_entry_it_was_folded_through() {
        use fairshare_events::codec;
        use fairshare_runtime::clock::SystemClock;
        use fairshare_testkit::events::{logged, node_registered, one_allocation_tree};

        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server.jetstream(Duration::from_secs(5)).await.unwrap();
        let mut fold = LogFold::new("c");
        for (subject, body) in [
            (subjects::policy("c"), one_allocation_tree("c", "a")),
            (subjects::node("c", "n1"), node_registered("c", "n1", 8)),
        ] {
            let event = pb::Event {
                at_ms: 1,
                body: Some(body.clone()),
            };
            let ack = js.publish(subject.clone(), codec::encode(&event));
            let sequence = ack.await.unwrap().await.unwrap().sequence;
            fold.apply(&logged(sequence, subject, 1, body));
        }
        let stored = fairshare_runtime::log::stored_ms_at(&js, 2).await.unwrap();
        assert!(stored.is_some(), "the log holds entry 2");
        assert_eq!(
            fairshare_runtime::log::stored_ms_at(&js, 3).await.unwrap(),
            None,
            "and nothing past it"
        );
        let dir = tempfile::tempdir().unwrap();
        let log = fairshare_runtime::log::log_position(&js).await.unwrap();
        let resumed_from = |stored_ms: Option<i64>| {
            let store = CheckpointStore::open(
                &dir.path().join("store"),
                &log.checkpoint_kind(&checkpoint_kind("c", None)),
                CHECKPOINT_VERSION,
            )
            .unwrap();
            store.save_at(2, stored_ms, &fold).unwrap();
            drop(store);
            let url = server.url();
            let mut config = Config::new("c");
            config.checkpoint_dir = Some(dir.path().join("store"));
            async move {
                let client = async_nats::connect(url).await.unwrap();
                let service = Service::start(client, config, Arc::new(SystemClock))
                    .await
                    .unwrap();
                let from = service.resumed_from();
                drop(service);
                // sled keeps a dropped store's lock for a moment.
                tokio::time::sleep(Duration::from_millis(200)).await;
                from
            }
        };
        assert_eq!(resumed_from(stored).await, 2, "the entry folded is there");
        assert_eq!(
            resumed_from(None).await,
            2,
            "no time to check: resumed as before"
        );
        let other = stored.map(|ms| ms + 1);
        assert_eq!(resumed_from(other).await, 0, "another entry there: rebuilt");
    }

    /// Tripwire for the checkpoint format (see `fairshare_testkit::sample_log`): if this
    /// fails, what the fold keeps for the sample log changed. Bump `CHECKPOINT_VERSION` (an
    /// older checkpoint would otherwise be resumed as though this code had folded it, and
    /// differ from a rebuild from the log), then put the new pair here.
    #[test]
    fn the_checkpoint_format_version_moves_with_what_the_fold_keeps() {
        use fairshare_testkit::sample_log::{SAMPLE_CLUSTER, sample_log, state_fingerprint};
        let mut fold = LogFold::new(SAMPLE_CLUSTER);
        for entry in sample_log() {
            fold.apply(&entry);
        }
        assert_eq!(
            (CHECKPOINT_VERSION, state_fingerprint(&fold)),
            (17, 12_896_277_754_775_603_556),
            "the fold's checkpointed form changed: bump CHECKPOINT_VERSION"
        );
    }

    fn store(dir: &std::path::Path, cluster: &str) -> CheckpointStore {
        CheckpointStore::open(dir, &checkpoint_kind(cluster, None), CHECKPOINT_VERSION).unwrap()
    }

    #[test]
    fn only_a_checkpoint_of_this_cluster_at_its_own_sequence_is_restored() {
        let dir = tempfile::tempdir().unwrap();
        let fold = fold_of("a");
        {
            let s = store(dir.path(), "a");
            assert_eq!(s.resume::<LogFold>("a", 4), None, "nothing saved yet");
            s.save(4, &fold).unwrap();
            assert_eq!(s.resume::<LogFold>("a", 4), Some(fold.clone()));
            // A log that ends before the checkpoint is another incarnation of the stream: the
            // checkpoint is refused and removed.
            assert_eq!(s.resume::<LogFold>("a", 3), None);
            assert!(s.load::<LogFold>().unwrap().is_none(), "removed");
            s.save(4, &fold).unwrap();
        }
        // Another cluster's store refuses the tag...
        assert_eq!(store(dir.path(), "b").resume::<LogFold>("b", 4), None);
        // ...and a fold of another cluster under this cluster's tag is refused too.
        {
            let s = store(dir.path(), "b");
            s.save(4, &fold).unwrap();
            assert_eq!(s.resume::<LogFold>("b", 4), None);
            // A sequence that disagrees with the fold's own.
            s.save(5, &fold_of("b")).unwrap();
            assert_eq!(s.resume::<LogFold>("b", u64::MAX), None);
            s.save(4, &fold_of("b")).unwrap();
            assert_eq!(s.resume::<LogFold>("b", 4), Some(fold_of("b")));
            s.write_raw(b"FSC3 not a checkpoint").unwrap();
            assert_eq!(s.resume::<LogFold>("b", 4), None);
        }
    }
}
