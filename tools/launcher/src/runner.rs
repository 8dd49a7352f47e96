//! The launcher's NATS loop: fold the cluster's job events, append what is due.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishError, context::PublishErrorKind};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::{codec, subjects};
use fairshare_runtime::clock::Clock;
use fairshare_runtime::envelope::Envelope;
use fairshare_runtime::log::{FollowError, Follower};
use fairshare_runtime::telemetry::{Handling, JobTraces, Relation, Role};

use crate::state::{Action, LauncherState};

/// How the launcher behaves.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The cluster it launches on.
    pub cluster: String,
    /// Job time runs this many times faster than the clock (60: a 1-hour job takes a minute).
    pub time_scale: u32,
    /// Run time of jobs whose payload names none.
    pub default_duration: Duration,
    /// Confirm preemption orders (off: let grace deadlines expire).
    pub honour_preemption: bool,
    /// How often due finishes are checked.
    pub tick: Duration,
}

/// Why the launcher stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The log could not be followed.
    #[error(transparent)]
    Follow(#[from] FollowError),
}

/// Runs until `shutdown` completes.
pub async fn run(
    client: async_nats::Client,
    config: RunnerConfig,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunnerError> {
    let js = jetstream::new(client);
    let filter = format!("{}.{}.job.*.*", subjects::EVENTS_PREFIX, config.cluster);
    let follower = Follower::start(&js, 1, vec![filter]).await?;
    // The follower reads in a task of its own: a `next()` dropped at every tick would never
    // finish following the log anew after a reconnect (that takes several round trips, more
    // than a tick while the stream elects a leader).
    let (entries, mut next_entry) = tokio::sync::mpsc::channel(FOLLOWED_AHEAD);
    let reader = tokio::spawn(read_log(follower, entries));
    let _reader = AbortOnDrop(reader);
    let default_ms = i64::try_from(config.default_duration.as_millis()).unwrap_or(i64::MAX);
    let mut state = LauncherState::new(default_ms, config.honour_preemption);
    // Each job's newest trace context: a start is a child of its placement, and so on.
    let mut traces = JobTraces::default();
    let mut tick = tokio::time::interval(config.tick);
    // A slow round of reports is not made up for by a burst of ticks.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Until the log is read to its end once, the state is half of what the log says: reports
    // from it would be refused (each expects its job's newest event), so none is sent.
    let mut caught_up = false;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            entry = next_entry.recv() => match entry {
                Some(Ok(entry)) => {
                    match &entry.event {
                        Ok(event) => state.apply(entry.sequence, event),
                        Err(e) => tracing::warn!(sequence = entry.sequence, subject = %entry.subject, "log entry unusable, folded as empty: {e}"),
                    }
                    // Whatever it was, it moved the job's subject.
                    if let Some((job_id, _)) = subjects::job_event_parts(&entry.subject) {
                        state.saw(job_id, entry.sequence);
                    }
                    traces.note(&entry);
                    if entry.pending == 0 {
                        caught_up = true;
                        act(&js, &config, clock.now_ms(), &mut state, &traces).await;
                    }
                }
                // Another log now: the jobs it knows of are not in it.
                Some(Err(e)) if e.ends_following() => return Err(e.into()),
                Some(Err(e)) => tracing::warn!("launcher log follower: {e}"),
                None => return Err(FollowError::Delivery("connection closed".into()).into()),
            },
            _ = tick.tick(), if caught_up => {
                act(&js, &config, clock.now_ms(), &mut state, &traces).await;
            }
        }
    }
}

/// Log entries the reader task may read ahead of the loop that folds them.
const FOLLOWED_AHEAD: usize = 1024;

/// Hands each entry `follower` reads to `entries` until the log or the loop is gone.
async fn read_log(
    mut follower: Follower,
    entries: tokio::sync::mpsc::Sender<Result<fairshare_runtime::log::LogEntry, FollowError>>,
) {
    while let Some(entry) = follower.next().await {
        if entries.send(entry).await.is_err() {
            return;
        }
    }
    // Dropping the sender tells the loop the connection closed.
}

/// Stops the reader task with the loop, whichever way the loop ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How many reports are in flight at once. A JetStream context holds a permit for each
/// acknowledgement not yet awaited (5,000 by default) and makes the next publish wait for one:
/// sending every due report before awaiting any would hang for good once more than that are
/// due at once (a restart on a large cluster full of placed jobs).
const REPORT_CHUNK: usize = 1_000;

async fn act(
    js: &jetstream::Context,
    config: &RunnerConfig,
    now_ms: i64,
    state: &mut LauncherState,
    traces: &JobTraces,
) {
    act_in_chunks(js, config, now_ms, state, traces, REPORT_CHUNK).await;
}

/// [`act`], `chunk` reports at a time.
async fn act_in_chunks(
    js: &jetstream::Context,
    config: &RunnerConfig,
    now_ms: i64,
    state: &mut LauncherState,
    traces: &JobTraces,
    chunk: usize,
) {
    // Every report of a chunk is sent before any acknowledgement is awaited, and a chunk's
    // acknowledgements are awaited together: one round trip for all that is due, not one per
    // job (at 1,000 placements a second, one at a time fell behind and the cluster filled up
    // with jobs that had long ended), and a connection gone bad costs one request timeout per
    // chunk, not one per report. One connection keeps them in order, finishes first.
    let mut due = state.due(now_ms, config.time_scale).into_iter().peekable();
    while due.peek().is_some() {
        let part: Vec<Action> = due.by_ref().take(chunk.max(1)).collect();
        let mut sent = Vec::with_capacity(part.len());
        for action in part {
            let (job_id, kind, result) = send_report(js, config, now_ms, traces, action).await;
            match result {
                Ok(ack) => sent.push((job_id, kind, ack)),
                Err(e) => reported(state, &job_id, kind, Err(e)),
            }
        }
        let answers = futures::future::join_all(
            sent.into_iter()
                .map(|(job_id, kind, ack)| async move { (job_id, kind, ack.await) }),
        )
        .await;
        for (job_id, kind, answer) in answers {
            reported(state, &job_id, kind, answer.map(|_| ()));
        }
    }
}

/// Sends the report `action` asks for, fenced on the job's newest event.
async fn send_report(
    js: &jetstream::Context,
    config: &RunnerConfig,
    now_ms: i64,
    traces: &JobTraces,
    action: Action,
) -> (
    String,
    &'static str,
    Result<jetstream::context::PublishAckFuture, PublishError>,
) {
    let (job_id, expected, kind, body) = match action {
        Action::Start { job_id, expected } => {
            let body = Body::JobStarted(pb::JobStarted {
                job_id: job_id.clone(),
            });
            (job_id, expected, "job_started", body)
        }
        Action::Finish { job_id, expected } => {
            let body = Body::JobFinished(pb::JobFinished {
                job_id: job_id.clone(),
                exit_code: 0,
            });
            (job_id, expected, "job_finished", body)
        }
        Action::FailTimeLimit {
            job_id,
            expected,
            limit_s,
        } => {
            let body = Body::JobFailed(pb::JobFailed {
                job_id: job_id.clone(),
                reason: format!("stopped at its time limit of {limit_s} s"),
            });
            (job_id, expected, "job_failed", body)
        }
        Action::ConfirmPreempted { job_id, expected } => {
            let body = Body::JobPreempted(pb::JobPreempted {
                job_id: job_id.clone(),
                killed: false,
            });
            (job_id, expected, "job_preempted", body)
        }
    };
    // Open until the report is sent: a child of the job's newest traced event.
    let span = Handling::start(
        format!("launcher {kind}"),
        Role::Publish,
        traces.get(&job_id),
        Relation::Child,
        &[("fairshare.job_id", &job_id)],
    );
    let envelope = Envelope {
        // One start/finish per placement: the expected sequence tells placements apart.
        message_id: format!("{kind}:{job_id}:{expected}"),
        trace: Some(span.hand_on()),
        expected_last_subject_sequence: Some((
            expected,
            Some(subjects::job(&config.cluster, &job_id)),
        )),
        ..Default::default()
    };
    let event = pb::Event {
        at_ms: now_ms,
        body: Some(body),
    };
    let subject = subjects::job_event(&config.cluster, &job_id, kind);
    let sent = js
        .publish_with_headers(subject, envelope.to_headers(), codec::encode(&event))
        .await;
    (job_id, kind, sent)
}

/// Notes how a report ended: a failure worth retrying makes the job due again.
fn reported(state: &mut LauncherState, job_id: &str, kind: &str, result: Result<(), PublishError>) {
    match result {
        Ok(()) => tracing::debug!(job_id, kind, "reported"),
        // The job moved on (cancelled, preempted) since we looked: the log will tell us.
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {}
        Err(e) => {
            tracing::warn!(job_id, kind, "report failed, will retry: {e}");
            state.retry(job_id);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use fairshare_events::streams::EVENTS_STREAM;

    /// More reports due at once than the context lets await acknowledgement all land, chunk
    /// by chunk: sending them all before awaiting any waited for a permit for ever.
    #[tokio::test]
    async fn more_reports_due_than_acknowledgements_in_flight_all_land() {
        let (server, js) = fairshare_testkit::NatsServer::with_streams().await;
        let mut state = LauncherState::new(3_600_000, true);
        let jobs: Vec<String> = (0..10).map(|i| format!("j{i}")).collect();
        for job in &jobs {
            let submitted = Body::JobSubmitted(pb::JobSubmitted {
                job_id: job.clone(),
                ..Default::default()
            });
            let placed = Body::JobPlaced(pb::JobPlaced {
                job_id: job.clone(),
                nodes: vec![pb::NodeGpus {
                    node: "n1".into(),
                    gpus: 1,
                }],
                basis: None,
            });
            for body in [submitted, placed] {
                let event = pb::Event {
                    at_ms: 1,
                    body: Some(body),
                };
                let subject = subjects::job_event("c", job, codec::event_kind(&event));
                let ack = js.publish(subject, codec::encode(&event)).await.unwrap();
                let sequence = ack.await.unwrap().sequence;
                state.apply(sequence, &event);
                state.saw(job, sequence);
            }
        }
        let client = async_nats::connect(server.url()).await.unwrap();
        let few_permits = jetstream::ContextBuilder::new()
            .max_ack_inflight(4)
            .build(client);
        let config = RunnerConfig {
            cluster: "c".into(),
            time_scale: 1,
            default_duration: Duration::from_secs(3600),
            honour_preemption: true,
            tick: Duration::from_millis(100),
        };
        let traces = JobTraces::default();
        tokio::time::timeout(
            Duration::from_secs(10),
            act_in_chunks(&few_permits, &config, 2, &mut state, &traces, 4),
        )
        .await
        .expect("no wait for an acknowledgement permit");
        let events = js.get_stream(EVENTS_STREAM).await.unwrap();
        for job in &jobs {
            let subject = subjects::job_event("c", job, "job_started");
            assert!(
                events
                    .get_last_raw_message_by_subject(&subject)
                    .await
                    .is_ok(),
                "{job} started"
            );
        }
    }
}
