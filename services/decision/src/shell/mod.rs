//! The NATS side of the decision service: one instance per GPU cluster.
//!
//! Start-up ([`Service::start`]): put the streams in place, fold the cluster's whole log
//! (`fairshare.events.<cluster>.>`: jobs, budget trees, nodes, maintenance, usage snapshots)
//! from sequence 1 to its current end into a [`LogFold`]. There is no sled checkpoint yet: the
//! domain state ([`crate::domain::DecisionState`]) has no serde form, so every start replays
//! the log (cheap next to accounting's: the state holds only live jobs, and the fold runs at
//! hundreds of thousands of events per second).
//!
//! Serving ([`Service::serve`]): one task owns the fold and the cycles, so a cycle always
//! decides from a prefix of the log and names it exactly.
//!
//! - It keeps folding new entries. Any entry that changes the state (submission, requeue, job
//!   end, start, preemption order, node or budget change, maintenance, usage snapshot) makes
//!   the state dirty; its own placements do not (they free nothing).
//! - A cycle runs after catch-up, then `debounce` after the first change since the last cycle,
//!   and every `cycle_every` regardless (see `pace`). Cycle numbers grow monotonically, also
//!   across restarts (they continue from the highest cycle any placement in the log names).
//! - A cycle runs [`decide()`](crate::domain::decide()) at the clock's "now" and publishes each
//!   placement (see `publish`: deterministic message id `placed:<job>:<expected>` and
//!   optimistic concurrency over the job's subjects, expected = the newest event of the job
//!   the state had folded, so a placement never lands after a cancel).
//! - The next cycle waits until the fold has applied every placement the previous cycle got
//!   acknowledged (the barrier). Otherwise it would see their GPUs as free and hand them out
//!   again. A placement whose outcome is unknown (timeout) is looked up in the stream (the
//!   newest event of that job) and the barrier raised to it before any further cycle.
//! - The latest cycle's waiting reasons are kept for [`Explainer`]s (see `explain`).
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

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use fairshare_events::streams::EVENTS_STREAM;
use fairshare_events::subjects;
use fairshare_runtime::clock::Clock;
use fairshare_runtime::log::{FollowError, Follower, LogEntry};
use fairshare_runtime::nats::{StreamSetupError, ensure_streams};
use futures::StreamExt;
use tokio::time::Instant;

use crate::domain::{DecisionState, decide};
pub use audit::{AuditError, AuditReport, Divergence, audit, audit_log, read_log, rederive};
pub use explain::{CycleSummary, Explainer, WaitingJob};
pub use fold::{Applied, LogFold};
use pace::Pacer;
use publish::{Outcome, ToPublish};

/// How long to wait before looking up a placement of unknown outcome again.
const LOOKUP_RETRY: Duration = Duration::from_secs(1);

/// How long the fold may lag behind the last cycle's placements, with no entry arriving,
/// before it is reported.
const STALL_WARNING: Duration = Duration::from_secs(10);

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The GPU cluster this instance decides for.
    pub cluster: String,
    /// A change-driven cycle runs this long after the first change since the last cycle.
    pub debounce: Duration,
    /// A cycle runs at least this often, changes or not.
    pub cycle_every: Duration,
    /// Replicas for streams this service creates (1 on a single server, 3 on a cluster).
    pub stream_replicas: usize,
}

impl Config {
    /// Defaults (20 ms debounce, a cycle at least every 5 s) for cluster `cluster`.
    pub fn new(cluster: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            debounce: Duration::from_millis(20),
            cycle_every: Duration::from_secs(5),
            stream_replicas: 1,
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
    /// The explain API could not be subscribed.
    #[error("cannot subscribe to explain requests: {0}")]
    Subscribe(String),
}

/// A started service: its fold is at the log's end as of start-up.
pub struct Service {
    config: Config,
    /// For explain replies.
    client: async_nats::Client,
    /// `fairshare.api.explain.<cluster>` requests.
    explain_requests: async_nats::Subscriber,
    js: jetstream::Context,
    events: jetstream::stream::Stream,
    follower: Follower,
    fold: LogFold,
    clock: Arc<dyn Clock>,
    board: explain::Publisher,
    next_cycle: u64,
    /// Jobs whose placement has an unknown outcome.
    unresolved: Vec<String>,
}

/// Logs an entry that does not decode (it is folded as an empty event).
fn report_undecodable(entry: &LogEntry) {
    if let Err(e) = &entry.event {
        tracing::error!(sequence = entry.sequence, subject = %entry.subject, "log entry does not decode, folded as empty: {e}");
    }
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
        let mut follower =
            Follower::start(&js, 1, vec![subjects::cluster_events(&config.cluster)]).await?;
        let mut fold = LogFold::new(&config.cluster);
        let started = std::time::Instant::now();
        if follower.pending_at_start > 0 {
            loop {
                let Some(entry) = follower.next().await else {
                    return Err(ServiceError::FollowerStopped(
                        "connection closed during catch-up".into(),
                    ));
                };
                let entry = entry?;
                report_undecodable(&entry);
                fold.apply(&entry);
                if entry.pending == 0 {
                    break;
                }
            }
        }
        tracing::info!(
            cluster = config.cluster,
            last_sequence = fold.last_applied(),
            queued = fold.state().queued_len(),
            last_cycle = fold.last_cycle(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "log folded; deciding"
        );
        let next_cycle = fold.last_cycle() + 1;
        let explain_requests = client
            .subscribe(subjects::explain_api(&config.cluster))
            .await
            .map_err(|e| ServiceError::Subscribe(e.to_string()))?;
        client
            .flush()
            .await
            .map_err(|e| ServiceError::Subscribe(e.to_string()))?;
        Ok(Self {
            client,
            explain_requests,
            config,
            js,
            events,
            follower,
            fold,
            clock,
            board: explain::Publisher::new(),
            next_cycle,
            unresolved: Vec::new(),
        })
    }

    /// The folded state (as of start-up until [`Service::serve`] takes over).
    pub fn state(&self) -> &DecisionState {
        self.fold.state()
    }

    /// A reader of each cycle's waiting reasons; keeps working while the service serves.
    pub fn explainer(&self) -> Explainer {
        self.board.explainer()
    }

    /// Folds and decides until `shutdown` completes.
    pub async fn serve(mut self, shutdown: impl Future<Output = ()>) -> Result<(), ServiceError> {
        let mut pacer = Pacer::new(
            Instant::now(),
            self.config.debounce,
            self.config.cycle_every,
        );
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
                () = wake => {
                    if pacer.blocked() {
                        self.resolve(&mut pacer).await;
                        continue;
                    }
                    let outcome = self.cycle().await;
                    pacer.ran(Instant::now(), outcome.max_sequence);
                    if !outcome.failed.is_empty() {
                        self.unresolved = outcome.failed;
                        pacer.block(Instant::now());
                        // Decide again once resolved: the placement may not have landed.
                        pacer.changed(Instant::now());
                    }
                }
                Some(message) = self.explain_requests.next() => {
                    // Computed synchronously: no borrow of the service is held across the send.
                    if let Some((reply_to, reply)) = self.explain_reply(&message) {
                        let client = self.client.clone();
                        if let Err(e) = client.publish(reply_to, reply).await {
                            tracing::warn!("could not send explain reply: {e}");
                        }
                    }
                }
                entry = self.follower.next() => match entry {
                    Some(Ok(entry)) => {
                        report_undecodable(&entry);
                        match self.fold.apply(&entry) {
                            Applied::Changed => pacer.changed(Instant::now()),
                            Applied::Placed => {}
                            Applied::Ignored(why) => {
                                tracing::debug!(sequence = entry.sequence, subject = %entry.subject, "not folded: {why}");
                            }
                        }
                    }
                    // The ordered consumer re-creates itself after a gap; report and go on.
                    Some(Err(e)) => tracing::warn!("log follower: {e}"),
                    None => break Err(ServiceError::FollowerStopped("connection closed".into())),
                },
                () = tokio::time::sleep(STALL_WARNING), if pacer.behind(self.fold.last_applied()) => {
                    tracing::warn!(
                        last_applied = self.fold.last_applied(),
                        "no cycle for {STALL_WARNING:?}: the log has not delivered the last cycle's placements yet"
                    );
                }
            }
        };
        tracing::info!(
            cluster = self.config.cluster,
            last_cycle = self.next_cycle.saturating_sub(1),
            "decision service stopped"
        );
        result
    }

    /// Looks up placements of unknown outcome; raises the barrier to each job's newest event.
    async fn resolve(&mut self, pacer: &mut Pacer) {
        let mut still = Vec::new();
        for job_id in std::mem::take(&mut self.unresolved) {
            match publish::newest_of_job(&self.events, &self.config.cluster, &job_id).await {
                Ok(sequence) => pacer.raise_barrier(sequence),
                Err(e) => {
                    tracing::warn!(job_id, "cannot look up the outcome of a placement: {e}");
                    still.push(job_id);
                }
            }
        }
        if still.is_empty() {
            pacer.unblock();
        } else {
            self.unresolved = still;
            pacer.block(Instant::now() + LOOKUP_RETRY);
        }
    }

    /// The reply to one explain request, from the current state (`None`: nobody to reply to).
    fn explain_reply(
        &self,
        message: &async_nats::Message,
    ) -> Option<(async_nats::Subject, bytes::Bytes)> {
        use fairshare_events::{codec, pb};
        let reply_to = message.reply.clone()?;
        let result = match codec::decode_explain_request(&message.payload) {
            Ok(request) => {
                crate::domain::explain(self.fold.state(), &request.job_id, self.clock.now_ms())
            }
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

    /// Runs one cycle and publishes its placements.
    async fn cycle(&mut self) -> Outcome {
        let cycle = self.next_cycle.max(self.fold.last_cycle() + 1);
        self.next_cycle = cycle + 1;
        let now_ms = self.clock.now_ms();
        let started = std::time::Instant::now();
        let (batch, through_sequence, waiting) = {
            let decision = decide(self.fold.state(), now_ms);
            self.board.publish(&decision, cycle);
            let mut batch = Vec::with_capacity(decision.placements.len());
            for event in decision.events(cycle) {
                let Some(fairshare_events::pb::event::Body::JobPlaced(p)) = &event.body else {
                    continue;
                };
                match self.fold.job_sequence(&p.job_id) {
                    Some(expected) => batch.push(ToPublish {
                        job_id: p.job_id.clone(),
                        expected,
                        event,
                    }),
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
        let decided_us = started.elapsed().as_micros() as u64;
        let placements = batch.len();
        let outcome = if batch.is_empty() {
            Outcome::default()
        } else {
            publish::publish(&self.js, &self.config.cluster, batch).await
        };
        tracing::debug!(
            cycle,
            through_sequence,
            placements,
            landed = outcome.landed,
            duplicates = outcome.duplicates,
            refused = outcome.refused,
            failed = outcome.failed.len(),
            waiting,
            decided_us,
            published_us = started.elapsed().as_micros() as u64 - decided_us,
            "cycle"
        );
        outcome
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
}
