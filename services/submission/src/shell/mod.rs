//! The NATS side of the submission service.
//!
//! Start-up: put the streams in place, fold the log up to its current end (so every key and job
//! accepted before a restart is known), then answer `fairshare.api.submit` and
//! `fairshare.api.cancel` in a queue group and consume `fairshare.intake.>` in order, while a
//! follower keeps folding new log entries.
//!
//! Exactly-once: each job-submitted event, and each job-rejected one whose key's id is free,
//! carries the message id `submit:<idempotency key>`, so JetStream drops a repeat inside its
//! duplicate window; beyond it the folded key table answers. (An intake rejection whose key's
//! id is taken carries `intake:<intake sequence>`: see the `intake` module.) Cancellation
//! appends on the job's own subject with the last sequence this service saw there, so it
//! cannot race a concurrent end of the job.

mod cancel;
mod checkpoint;
mod follow;
mod intake;
mod shared;
mod submit;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use fairshare_events::subjects;
use fairshare_runtime::checkpoint::CheckpointError;
use fairshare_runtime::clock::Clock;
use fairshare_runtime::log::{FollowError, Follower, log_position, settle_subscriptions};
use fairshare_runtime::nats::{StreamSetupError, ensure_streams};
use fairshare_runtime::task::AbortOnDrop;
use futures::StreamExt;
use tokio::task::JoinSet;

use crate::domain::Limits;
pub use follow::apply_entry;
use shared::Shared;

/// Requests handled at once, at most. Past it the service stops reading requests until some
/// finish: a flood (or a JetStream slow to acknowledge, each publish waiting up to its timeout)
/// then waits in the subscription's buffer, and past that the requesters time out and retry
/// with their idempotency keys, instead of tasks and memory growing without limit.
const MAX_IN_FLIGHT: usize = 1024;

/// How long a stopping service waits for requests it already took and for the broker's
/// last acknowledgement: a JetStream publish gives up after 5 s, so this covers a handler
/// that started just before the stop.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(8);

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Limits submissions are checked against.
    pub limits: Limits,
    /// Replicas for streams this service creates (1 on a single server, 3 on a cluster).
    pub stream_replicas: usize,
    /// Whether this instance consumes the durable intake stream.
    pub consume_intake: bool,
    /// Where the sled checkpoint lives (one directory per instance); `None` keeps none and
    /// folds the log from sequence 1 on every start.
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoint after this many applied entries...
    pub checkpoint_every_events: u64,
    /// ...or on a timer of this period when entries came since the last checkpoint.
    pub checkpoint_every: Duration,
    /// How long the service may be cut off from NATS before it stops
    /// ([`fairshare_runtime::disconnect`]): a submission it could not confirm stays in the
    /// client until it reconnects, and landing after the stream's duplicate window it would
    /// be a second job beside the retry's.
    pub max_disconnect: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            stream_replicas: 1,
            consume_intake: true,
            checkpoint_dir: None,
            checkpoint_every_events: 10_000,
            checkpoint_every: Duration::from_secs(5),
            max_disconnect: fairshare_runtime::disconnect::DEFAULT_MAX_DISCONNECT,
        }
    }
}

/// Why the service stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The streams could not be created or updated.
    #[error(transparent)]
    Streams(#[from] StreamSetupError),
    /// The log could not be followed.
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// A request subject could not be subscribed.
    #[error("cannot subscribe to {subject}: {detail}")]
    Subscribe {
        /// The subject.
        subject: &'static str,
        /// What the client said.
        detail: String,
    },
    /// The intake consumer could not be created or failed.
    #[error("intake consumer: {0}")]
    Intake(String),
    /// The log follower stopped (connection closed).
    #[error("the log follower stopped: {0}")]
    FollowerStopped(String),
    /// The checkpoint store could not be opened (e.g. another instance holds it).
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The payload limit leaves an accepted submission's event no room within the largest
    /// message the NATS server takes: such a submission could never be written.
    #[error(
        "--max-payload-bytes {limit} is too large for this NATS server (max_payload \
         {server_max} bytes): the job-submitted event carries the payload plus up to \
         {EVENT_OVERHEAD_BYTES} bytes of names, key and headers; use at most {allowed}"
    )]
    PayloadLimit {
        /// The configured limit.
        limit: usize,
        /// The server's `max_payload`.
        server_max: usize,
        /// The largest limit that fits.
        allowed: usize,
    },
    /// Cut off from NATS for longer than [`Config::max_disconnect`]: stopped, so that the
    /// writes the client still holds are dropped rather than sent after the stream's
    /// duplicate window (a second job for a key a retry was accepted under meanwhile).
    #[error(
        "cut off from NATS for {0:?}: stopping, so that submissions it could not confirm are \
         not written after the stream's duplicate window (a restart connects afresh)"
    )]
    CutOff(Duration),
}

/// What a `JobSubmitted` event and its headers can add to the launcher's payload: the other
/// fields of the spec (each bounded by [`Limits`] or by the budget tree's
/// names), the job id, the key twice (event and header), the message id and trace context.
pub const EVENT_OVERHEAD_BYTES: usize = 8 * 1024;

/// Refuses a payload limit the server could never carry in an event ([`EVENT_OVERHEAD_BYTES`]
/// more); otherwise a submission near the limit would fail to append on every retry, and on
/// the intake hold up every message behind it.
fn check_payload_limit(limits: &Limits, server_max: usize) -> Result<(), ServiceError> {
    let allowed = server_max.saturating_sub(EVENT_OVERHEAD_BYTES);
    if limits.max_payload_bytes > allowed {
        return Err(ServiceError::PayloadLimit {
            limit: limits.max_payload_bytes,
            server_max,
            allowed,
        });
    }
    Ok(())
}

/// A started service: state folded up to the log's end, ready to serve.
pub struct Service {
    /// State and handles the tasks share.
    shared: Arc<Shared>,
    /// Keeps folding the log once serving starts.
    follower: Follower,
    /// For replies.
    client: async_nats::Client,
    /// Submit requests.
    submits: async_nats::Subscriber,
    /// Cancel requests.
    cancels: async_nats::Subscriber,
    /// The durable intake consumer, if this instance consumes intake.
    intake: Option<async_nats::jetstream::consumer::PullConsumer>,
    /// The checkpoint store and its cadence, if configured.
    checkpoints: Option<checkpoint::Checkpoints>,
    /// The checkpoint sequence this start resumed from (0: folded from the beginning).
    resumed_from: u64,
    /// How long it may be cut off from NATS before it stops ([`Config::max_disconnect`]).
    max_disconnect: Duration,
}

async fn subscribe(
    client: &async_nats::Client,
    subject: &'static str,
) -> Result<async_nats::Subscriber, ServiceError> {
    client
        .queue_subscribe(subject, subjects::SUBMISSION_QUEUE_GROUP.to_owned())
        .await
        .map_err(|e| ServiceError::Subscribe {
            subject,
            detail: e.to_string(),
        })
}

/// Subjects the submission state is folded from (usage snapshots and decisions' cycle records
/// are not needed here).
pub fn log_filters() -> Vec<String> {
    let p = subjects::EVENTS_PREFIX;
    vec![
        format!("{p}.*.job.*.*"),
        format!("{p}.*.policy"),
        format!("{p}.*.node.*"),
        format!("{p}.*.rejected"),
    ]
}

impl Service {
    /// Sets up streams and folds the log to its current end.
    pub async fn start(
        client: async_nats::Client,
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ServiceError> {
        check_payload_limit(&config.limits, client.server_info().max_payload)?;
        let js = jetstream::new(client.clone());
        ensure_streams(&js, config.stream_replicas).await?;
        let log = log_position(&js).await?;
        let store = match &config.checkpoint_dir {
            Some(dir) => Some(Arc::new(checkpoint::open(dir, &log)?)),
            None => None,
        };
        let state = checkpoint::resume(store.as_deref(), &log, &js).await;
        let resumed_from = state.last_sequence;
        let mut follower = Follower::start(&js, resumed_from + 1, log_filters()).await?;
        follower.resuming_after(state.last_stored_ms);
        follower.expect_log(&log)?;
        let shared = Arc::new(Shared::new(js, config.limits.clone(), clock, state).await?);
        follow::catch_up(&shared, &mut follower).await?;
        let checkpoints = store.map(|store| {
            checkpoint::Checkpoints::new(
                store,
                config.checkpoint_every_events,
                config.checkpoint_every,
            )
        });
        // A long catch-up is not repeated after a crash before the first timed checkpoint.
        if let Some(c) = &checkpoints {
            c.write_now(&shared);
        }
        // Subscribe before returning, so a caller that sees `start` complete can send requests.
        let submits = subscribe(&client, subjects::SUBMIT_API).await?;
        let cancels = subscribe(&client, subjects::CANCEL_API).await?;
        settle_subscriptions(&client)
            .await
            .map_err(|e| ServiceError::Subscribe {
                subject: subjects::SUBMIT_API,
                detail: format!("the server did not confirm it: {e}"),
            })?;
        let intake = if config.consume_intake {
            Some(intake::consumer(&shared).await?)
        } else {
            None
        };
        tracing::info!(
            last_sequence = shared.applied(),
            resumed_from,
            "log folded; serving submissions"
        );
        Ok(Self {
            shared,
            follower,
            client,
            submits,
            cancels,
            intake,
            checkpoints,
            resumed_from,
            max_disconnect: config.max_disconnect,
        })
    }

    /// The checkpoint sequence this start resumed from; 0 when it folded from the beginning
    /// (no checkpoint configured, none written yet, or one that could not be used).
    pub fn resumed_from(&self) -> u64 {
        self.resumed_from
    }

    /// A copy of the folded state (for tests and diagnostics).
    pub fn state(&self) -> crate::domain::SubmissionState {
        self.shared.state().clone()
    }

    /// Serves requests and intake until `shutdown` completes, then drains in-flight work.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServiceError> {
        let Self {
            shared,
            follower,
            client,
            mut submits,
            mut cancels,
            intake,
            checkpoints,
            resumed_from: _,
            max_disconnect,
        } = self;
        // Aborted with this future if it is dropped before its shutdown ran.
        let mut follower_task = AbortOnDrop::new(tokio::spawn(follow::run(
            shared.clone(),
            follower,
            checkpoints.clone(),
        )));
        let mut intake_task = intake
            .map(|consumer| AbortOnDrop::new(tokio::spawn(intake::run(shared.clone(), consumer))));
        // Set once the follower task has returned (a JoinHandle is not polled again after).
        let mut follower_done = false;
        let mut in_flight = JoinSet::new();
        tokio::pin!(shutdown);
        let cut_off = fairshare_runtime::disconnect::cut_off_for(&client, max_disconnect);
        tokio::pin!(cut_off);
        let result = loop {
            tokio::select! {
                () = &mut shutdown => break Ok(()),
                lasted = &mut cut_off => break Err(ServiceError::CutOff(lasted)),
                Some(msg) = submits.next(), if in_flight.len() < MAX_IN_FLIGHT => {
                    in_flight.spawn(submit::handle(shared.clone(), client.clone(), msg));
                }
                Some(msg) = cancels.next(), if in_flight.len() < MAX_IN_FLIGHT => {
                    in_flight.spawn(cancel::handle(shared.clone(), client.clone(), msg));
                }
                Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                done = &mut follower_task => {
                    follower_done = true;
                    break Err(ServiceError::FollowerStopped(match done {
                        Ok(Err(e)) => e.to_string(),
                        Ok(Ok(())) => "connection closed".into(),
                        Err(e) => e.to_string(),
                    }));
                }
                done = async { intake_task.as_mut().expect("guarded by the condition").await }, if intake_task.is_some() => {
                    let detail = match done {
                        Ok(Err(e)) => e.to_string(),
                        Ok(Ok(())) => "intake consumer ended".into(),
                        Err(e) => e.to_string(),
                    };
                    break Err(ServiceError::Intake(detail));
                }
            }
        };
        // Stop taking new requests, finish the ones already taken, then stop the background
        // tasks; an intake message being handled is simply redelivered after a restart. With
        // the broker gone the flush would wait for it for ever: the drain is bounded, and what
        // it cuts short is a request its sender retries with the same idempotency key.
        let drain = async {
            let _ = submits.unsubscribe().await;
            let _ = cancels.unsubscribe().await;
            while in_flight.join_next().await.is_some() {}
            let _ = client.flush().await;
        };
        // Cut off, there is nothing to drain into: the writes held are what stopping drops.
        let cut = matches!(result, Err(ServiceError::CutOff(_)));
        if !cut && tokio::time::timeout(SHUTDOWN_DRAIN, drain).await.is_err() {
            tracing::warn!(
                "NATS did not answer within {SHUTDOWN_DRAIN:?}: stopping without a full drain"
            );
        }
        if let Some(t) = intake_task {
            t.abort();
        }
        if !follower_done {
            follower_task.abort();
            // Cancelled, it writes nothing after the final checkpoint below.
            let _ = follower_task.await;
        }
        // Whatever stopped it, the state is a fold of a prefix of the log and safe to keep.
        if let Some(c) = &checkpoints {
            c.write_now(&shared);
        }
        tracing::info!("submission service stopped");
        result
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use fairshare_runtime::clock::SystemClock;

    use super::*;

    /// A server taking messages of at most 64 KiB cannot carry the event of a 64 KiB payload:
    /// the service says so at start, with the largest limit that works, instead of failing
    /// every such submission later.
    #[tokio::test]
    async fn a_payload_limit_the_server_cannot_carry_is_refused_at_start() {
        let server =
            fairshare_testkit::NatsServer::start_with_config("max_payload: 65536\n").unwrap();
        let start = |max_payload_bytes| {
            let url = server.url();
            async move {
                let client = async_nats::connect(url).await.unwrap();
                let config = Config {
                    limits: Limits {
                        max_payload_bytes,
                        ..Limits::default()
                    },
                    consume_intake: false,
                    ..Config::default()
                };
                Service::start(client, config, Arc::new(SystemClock)).await
            }
        };
        let Err(refused) = start(64 * 1024).await else {
            panic!("a 64 KiB payload limit on a 64 KiB server must be refused");
        };
        let allowed = 65_536 - EVENT_OVERHEAD_BYTES;
        assert!(
            matches!(refused, ServiceError::PayloadLimit { allowed: a, .. } if a == allowed),
            "{refused}"
        );
        assert!(
            refused
                .to_string()
                .contains(&format!("use at most {allowed}")),
            "{refused}"
        );
        assert!(start(allowed).await.is_ok());
    }

    /// Cut off from NATS for longer than its limit, the service stops (the client's buffered
    /// submissions with it), so none lands after the stream's duplicate window beside a
    /// retry's job; connected, it keeps serving.
    #[tokio::test]
    async fn a_service_cut_off_from_nats_past_its_limit_stops() {
        let mut server = fairshare_testkit::NatsServer::start().unwrap();
        let client = async_nats::connect(server.url()).await.unwrap();
        let limit = Duration::from_millis(600);
        let config = Config {
            consume_intake: false,
            max_disconnect: limit,
            ..Config::default()
        };
        let service = Service::start(client, config, Arc::new(SystemClock))
            .await
            .unwrap();
        let mut serving = tokio::spawn(service.serve(std::future::pending()));
        assert!(
            tokio::time::timeout(limit * 3, &mut serving).await.is_err(),
            "connected, it keeps serving"
        );
        server.kill();
        let stopped = tokio::time::timeout(Duration::from_secs(20), serving)
            .await
            .expect("stops once cut off past its limit")
            .unwrap();
        match stopped {
            Err(ServiceError::CutOff(lasted)) => assert!(lasted >= limit, "{lasted:?}"),
            other => panic!("expected CutOff, got {other:?}"),
        }
    }
}
