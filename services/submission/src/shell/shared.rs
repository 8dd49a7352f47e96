//! State and helpers the request handlers, the intake consumer and the follower share.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishErrorKind};
use fairshare_events::{codec, pb, streams::EVENTS_STREAM, subjects};
use fairshare_runtime::clock::Clock;
use fairshare_runtime::envelope::Envelope;
use fairshare_runtime::log::newest_sequence;
use tokio::sync::watch;

use super::ServiceError;
use crate::domain::{Limits, SubmissionState};

/// Everything the service's tasks share.
pub(super) struct Shared {
    /// The folded state; locked only for short, synchronous checks and updates.
    state: Mutex<SubmissionState>,
    /// The last log sequence the follower applied, for handlers that must wait for the fold.
    applied: watch::Sender<u64>,
    /// JetStream, for appending.
    pub js: jetstream::Context,
    /// The events stream, for reading back an entry a duplicate ack points at.
    pub events: jetstream::stream::Stream,
    /// Limits submissions are checked against.
    pub limits: Limits,
    /// Source of event times.
    pub clock: Arc<dyn Clock>,
}

/// Why an append did not happen, or may not have.
#[derive(Debug)]
pub(super) enum AppendError {
    /// Optimistic concurrency: the subject moved on since the expected sequence.
    Conflict,
    /// The message was not handed to the connection: nothing was written.
    NotSent(String),
    /// Sent, but the stream did not acknowledge it (a timeout, a broken connection, a leader
    /// change): it may have landed, now or once the client reconnects.
    Unconfirmed(String),
}

impl Shared {
    /// Shared state starting from `state` (empty, or a checkpoint's).
    pub async fn new(
        js: jetstream::Context,
        limits: Limits,
        clock: Arc<dyn Clock>,
        state: SubmissionState,
    ) -> Result<Self, ServiceError> {
        let events = js
            .get_stream(EVENTS_STREAM)
            .await
            .map_err(|e| fairshare_runtime::log::FollowError::Stream(e.to_string()))?;
        Ok(Self {
            applied: watch::Sender::new(state.last_sequence),
            state: Mutex::new(state),
            js,
            events,
            limits,
            clock,
        })
    }

    /// The state, for a short synchronous section.
    pub fn state(&self) -> MutexGuard<'_, SubmissionState> {
        // Nothing the fold calls panics today. Were one to, mid-entry, the state would hold the
        // entry's position and log time without its event, and so would a checkpoint written
        // after it (remove the checkpoint directory to fold afresh); serving on from it beats
        // a service that answers nothing.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The last sequence the follower applied.
    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Marks `sequence` as folded.
    pub fn set_applied(&self, sequence: u64) {
        self.applied.send_if_modified(|s| {
            let moved = sequence > *s;
            if moved {
                *s = sequence;
            }
            moved
        });
    }

    /// Waits until the fold has reached `sequence`, or `timeout` passes.
    pub async fn wait_applied(&self, sequence: u64, timeout: Duration) -> bool {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|s| *s >= sequence))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Waits until the fold holds the newest budget tree and node events of `cluster` (a
    /// valid cluster token). `Err` if the log cannot be read or the fold does not get there
    /// within `timeout`.
    pub async fn catch_up_on_cluster(
        &self,
        cluster: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        let mut newest = 0;
        for filter in [subjects::policy(cluster), subjects::node(cluster, "*")] {
            newest = newest.max(newest_sequence(&self.events, &filter).await?);
        }
        if self.wait_applied(newest, timeout).await {
            Ok(())
        } else {
            Err(format!(
                "the fold is behind the log (sequence {newest} of cluster {cluster}'s policy \
                 and nodes not reached within {timeout:?})"
            ))
        }
    }

    /// Appends `body` at the current time on `subject`; returns (sequence, duplicate). The
    /// current time is never before the log's (the newest time the stream stored an entry at):
    /// a host clock behind by a whole window would otherwise stamp a submission that
    /// accounting skips as stale while the decision service places it, a job run uncharged.
    pub async fn append(
        &self,
        subject: String,
        body: pb::event::Body,
        envelope: &Envelope,
    ) -> Result<(u64, bool), AppendError> {
        let log_time_ms = self.state().log_time_ms;
        let event = pb::Event {
            at_ms: self.clock.now_ms().max(log_time_ms),
            body: Some(body),
        };
        let ack = self
            .js
            .publish_with_headers(subject, envelope.to_headers(), codec::encode(&event))
            .await
            .map_err(|e| AppendError::NotSent(e.to_string()))?
            .await
            .map_err(|e| match e.kind() {
                PublishErrorKind::WrongLastSequence => AppendError::Conflict,
                _ => AppendError::Unconfirmed(e.to_string()),
            })?;
        Ok((ack.sequence, ack.duplicate))
    }

    /// Reads back the event at `sequence` (what a duplicate ack points at). `Err` means it
    /// could not be read (try again later); `Ok(None)`, that the entry there is no event this
    /// service can read (bytes another publisher wrote), which no retry changes.
    pub async fn read_event(&self, sequence: u64) -> Result<Option<pb::Event>, String> {
        let message = self
            .events
            .get_raw_message(sequence)
            .await
            .map_err(|e| format!("cannot read back sequence {sequence}: {e}"))?;
        match codec::decode_log_entry(&message.subject, &message.payload) {
            Ok(event) => Ok(Some(event)),
            Err(e) => {
                tracing::warn!(sequence, "entry read back does not decode: {e}");
                Ok(None)
            }
        }
    }
}

/// How long a submission whose rejection [`depends_on_inventory`] waits for the fold to reach
/// its cluster's newest budget tree and node events before it is judged again.
pub(super) const CATCH_UP: Duration = Duration::from_secs(2);

/// Whether `rejection` of `request` depends on the cluster's budget tree or nodes as folded so
/// far (and may not stand once the newest of them are: a tree or node applied a moment ago).
/// Not when it is the key's answer in the log, which is final, nor for a cluster name that no
/// cluster can have.
pub(super) fn depends_on_inventory(
    state: &SubmissionState,
    request: &pb::SubmitRequest,
    rejection: &pb::Rejection,
) -> bool {
    use pb::RejectionCode as Code;
    let inventory = [
        Code::UnknownCluster,
        Code::UnknownAllocation,
        Code::TooManyGpus,
        Code::ShapeMismatch,
    ]
    .iter()
    .any(|&code| rejection.code == code as i32);
    inventory
        && !state.keys.contains_key(&request.idempotency_key)
        && request
            .spec
            .as_ref()
            .is_some_and(|s| subjects::is_valid_token(&s.cluster))
}

/// The answer to a submission judged on a fold that could not reach its cluster's newest
/// budget tree and nodes in time.
pub(super) fn behind(detail: &str) -> pb::Rejection {
    pb::Rejection {
        code: pb::RejectionCode::Unavailable as i32,
        message: format!(
            "the service has not yet read the newest budget tree and nodes ({detail}); nothing \
             changed, retry with the same key"
        ),
    }
}

/// A rejection meaning "nothing was written; retry with the same key".
pub(super) fn unavailable(detail: &str) -> pb::Rejection {
    pb::Rejection {
        code: pb::RejectionCode::Unavailable as i32,
        message: format!(
            "the event log could not be written ({detail}); nothing changed, retry with the same key"
        ),
    }
}

/// How a caller retries a request safely, for the rejection texts.
#[derive(Debug, Clone, Copy)]
pub(super) enum Retry {
    /// A submission: with the same idempotency key, which never submits twice.
    SameKey,
    /// A cancellation: a job cancelled already is answered with its cancellation.
    Cancel,
}

/// A rejection meaning "the write may have landed; retry", which finds it if it did and
/// writes it if it did not.
pub(super) fn unconfirmed(detail: &str, retry: Retry) -> pb::Rejection {
    let how = match retry {
        Retry::SameKey => "retry with the same key, which never applies it twice",
        Retry::Cancel => "retry the cancel, which answers with the cancellation if it landed",
    };
    pb::Rejection {
        code: pb::RejectionCode::Unavailable as i32,
        message: format!(
            "the event log did not confirm the write ({detail}); it may have landed: {how}"
        ),
    }
}

/// What an append error tells the caller.
pub(super) fn rejection_of(error: AppendError, retry: Retry) -> pb::Rejection {
    match error {
        AppendError::Conflict => unavailable("unexpected sequence conflict"),
        AppendError::NotSent(detail) => unavailable(&detail),
        AppendError::Unconfirmed(detail) => unconfirmed(&detail, retry),
    }
}

/// A rejection for bytes that did not decode.
pub(super) fn malformed(detail: &str) -> pb::Rejection {
    pb::Rejection {
        code: pb::RejectionCode::Malformed as i32,
        message: detail.to_owned(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used)]

    /// A fresh server with the streams, and a service state on it with default limits and
    /// nothing folded yet.
    pub(in crate::shell) async fn fresh_shared() -> (
        fairshare_testkit::NatsServer,
        jetstream::Context,
        Arc<Shared>,
    ) {
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server.jetstream(Duration::from_secs(5)).await.unwrap();
        let shared = Shared::new(
            js.clone(),
            Limits::default(),
            Arc::new(SystemClock),
            SubmissionState::default(),
        )
        .await
        .unwrap();
        (server, js, Arc::new(shared))
    }

    /// Logs cluster `c`'s budget tree (allocation `a`) and node `n1` (8 GPUs) without folding
    /// them: the log moves ahead of the service's fold. Returns what was logged.
    pub(in crate::shell) async fn log_cluster_c(js: &jetstream::Context) -> Vec<(u64, pb::Event)> {
        let at_ms = 1_700_000_000_000;
        use fairshare_testkit::events::{node_registered, one_allocation_tree};
        let inventory = [
            (subjects::policy("c"), one_allocation_tree("c", "a")),
            (subjects::node("c", "n1"), node_registered("c", "n1", 8)),
        ];
        let mut logged = Vec::new();
        for (subject, body) in inventory {
            let event = pb::Event {
                at_ms,
                body: Some(body),
            };
            let ack = js.publish(subject, codec::encode(&event)).await.unwrap();
            logged.push((ack.await.unwrap().sequence, event));
        }
        logged
    }

    /// Folds `logged` into the service's state 300 ms from now, as a follower a moment behind
    /// the log would.
    pub(in crate::shell) fn fold_later(
        shared: &Arc<Shared>,
        logged: Vec<(u64, pb::Event)>,
    ) -> tokio::task::JoinHandle<()> {
        let shared = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            for (sequence, event) in &logged {
                shared.state().apply(*sequence, event);
                shared.set_applied(*sequence);
            }
        })
    }

    /// A valid 1-GPU submission with key `key` to allocation `a` of cluster `c` (1 min
    /// minimum runtime), for the shell's tests.
    pub(in crate::shell) fn one_gpu_request(key: &str) -> pb::SubmitRequest {
        pb::SubmitRequest {
            idempotency_key: key.into(),
            spec: Some(pb::JobSpec {
                cluster: "c".into(),
                allocation: "a".into(),
                gpus: 1,
                nodes: 1,
                min_runtime_s: 60,
                ..Default::default()
            }),
        }
    }

    use fairshare_events::pb::event::Body;
    use fairshare_runtime::clock::SystemClock;

    use super::*;

    /// A host clock behind the log's time (here by 50 years) stamps nothing before it: the
    /// event written takes the log's time.
    #[tokio::test]
    async fn events_are_never_stamped_before_the_logs_time() {
        let server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server.jetstream(Duration::from_secs(5)).await.unwrap();
        let clock = fairshare_runtime::clock::ManualClock::new(1_000);
        let shared = Shared::new(
            js,
            Limits::default(),
            Arc::new(clock.clone()),
            SubmissionState::default(),
        )
        .await
        .unwrap();
        let stored = 1_800_000_000_000;
        let snapshot = pb::Event {
            at_ms: 0,
            body: Some(Body::UsageSnapshot(Default::default())),
        };
        shared.state().apply_stored(1, &snapshot, Some(stored));
        let shared = &shared;
        let write = |job: &str| {
            let body = Body::JobStarted(pb::JobStarted { job_id: job.into() });
            let subject = fairshare_events::subjects::job_event("c", job, "job_started");
            async move {
                let (sequence, _) = shared
                    .append(subject, body, &Envelope::default())
                    .await
                    .unwrap();
                shared.read_event(sequence).await.unwrap().unwrap().at_ms
            }
        };
        assert_eq!(write("behind").await, stored);
        // A clock ahead of the log's time stamps its own.
        clock.set(stored + 5_000);
        assert_eq!(write("ahead").await, stored + 5_000);
    }

    /// A write the broker never acknowledges (it died) may still land once the client
    /// reconnects: the caller must not be told that nothing changed.
    #[tokio::test]
    async fn a_write_to_a_dead_broker_is_unconfirmed_not_unwritten() {
        let mut server = fairshare_testkit::NatsServer::start().unwrap();
        let js = server
            .jetstream(std::time::Duration::from_millis(500))
            .await
            .unwrap();
        let shared = Shared::new(
            js,
            Limits::default(),
            Arc::new(SystemClock),
            SubmissionState::default(),
        )
        .await
        .unwrap();
        server.kill();
        let body = Body::JobStarted(pb::JobStarted { job_id: "j".into() });
        let subject = fairshare_events::subjects::job_event("c", "j", "job_started");
        let err = shared
            .append(subject, body, &Envelope::default())
            .await
            .unwrap_err();
        assert!(matches!(err, AppendError::Unconfirmed(_)), "{err:?}");
        let rejection = rejection_of(err, Retry::SameKey);
        assert_eq!(rejection.code, pb::RejectionCode::Unavailable as i32);
        assert!(
            rejection.message.contains("may have landed"),
            "{}",
            rejection.message
        );
        assert!(!rejection.message.contains("nothing changed"));
    }
}
