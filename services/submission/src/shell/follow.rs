//! Keeps the submission state folded from the log, and checkpoints it on the cadence.

use std::sync::Arc;

use fairshare_events::subjects;
use fairshare_runtime::log::{FollowError, Follower, LogEntry};

use super::checkpoint::Checkpoints;
use super::shared::Shared;
use crate::domain::{Applied, SubmissionState};

/// The cluster of the job a job event's subject names, when the subject files it under
/// another cluster. A job's events belong to its cluster only: NATS lets a launcher publish on
/// any cluster's job subjects its permissions cover, and job bodies name no cluster (so
/// [`subjects::check_filed`] cannot see it). Folded, such an event would end the job here (a
/// cancel then refused as "ended") or move its subject's sequence (every cancel then refused
/// as stale), while the job's own cluster never saw it.
fn filed_in_another_cluster(state: &SubmissionState, subject: &str) -> Option<String> {
    let (job_id, _) = subjects::job_event_parts(subject)?;
    let filed = subjects::cluster_of(subject)?;
    let job = state.jobs.get(job_id)?;
    (job.cluster != filed).then(|| job.cluster.clone())
}

fn apply(shared: &Shared, entry: LogEntry) {
    apply_entry(&mut shared.state(), &entry);
    shared.set_applied(entry.sequence);
}

/// Folds one entry of the log (on [`super::log_filters`]) into `state` as the service does:
/// the fold a restarted service rebuilds (checkpoint plus catch-up) must equal this one from
/// scratch.
pub fn apply_entry(state: &mut SubmissionState, entry: &LogEntry) {
    if let Some(theirs) = filed_in_another_cluster(state, &entry.subject) {
        tracing::error!(
            sequence = entry.sequence,
            subject = %entry.subject,
            job_cluster = theirs,
            "job event stored under another cluster than its job's, skipped"
        );
        skip(state, entry);
        return;
    }
    match &entry.event {
        Ok(event) => {
            let applied = state.apply_stored(entry.sequence, event, entry.stored_ms);
            if let Applied::Ignored(why) = applied {
                tracing::warn!(sequence = entry.sequence, subject = %entry.subject, "{why}");
            }
        }
        Err(e) => {
            // A malformed entry cannot be un-written; report it and fold past it so one bad
            // publisher cannot stop submissions.
            tracing::error!(sequence = entry.sequence, subject = %entry.subject, "log entry skipped: {e}");
            skip(state, entry);
        }
    }
    if state.last_sequence == entry.sequence {
        state.last_stored_ms = entry.stored_ms;
    }
    // Whatever the entry said, it is the newest on its job's subject: a cancel must expect
    // it, or every cancel of that job would be refused until the job's next good event.
    if let Some((job_id, _kind)) = subjects::job_event_parts(&entry.subject) {
        state.note_job_subject(job_id, entry.sequence);
    }
}

/// Folds past `entry` without its event: only the position and the log's time move.
fn skip(state: &mut SubmissionState, entry: &LogEntry) {
    state.last_sequence = state.last_sequence.max(entry.sequence);
    if let Some(stored_ms) = entry.stored_ms {
        state.advance_log_time(stored_ms);
    }
}

/// Folds until the follower has delivered every entry that existed when it started.
pub(super) async fn catch_up(shared: &Shared, follower: &mut Follower) -> Result<(), FollowError> {
    follower
        .catch_up(|entry| apply(shared, entry))
        .await
        .map(|_| ())
}

/// Folds new entries as they are appended, until the connection closes; with a checkpoint
/// store, writes one in the background after `every_events` entries, or on the `every` timer
/// when entries came since the last.
pub(super) async fn run(
    shared: Arc<Shared>,
    mut follower: Follower,
    checkpoints: Option<Checkpoints>,
) -> Result<(), FollowError> {
    let every = checkpoints
        .as_ref()
        .map_or(std::time::Duration::from_secs(3600), |c| c.every);
    let mut timer = tokio::time::interval(every);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut since = 0u64;
    loop {
        tokio::select! {
            entry = follower.next() => {
                match entry {
                    Some(Ok(entry)) => apply(&shared, entry),
                    // Another log now: the fold describes none of it.
                    Some(Err(e)) if e.ends_following() => return Err(e),
                    // The follower makes a new consumer after a gap; report and go on.
                    Some(Err(e)) => tracing::warn!("log follower: {e}"),
                    None => return Ok(()),
                }
                since += 1;
                if let Some(c) = checkpoints.as_ref().filter(|c| since >= c.every_events) {
                    c.write_in_background(&shared);
                    since = 0;
                }
            }
            _ = timer.tick(), if checkpoints.is_some() => {
                if let Some(c) = checkpoints.as_ref().filter(|_| since > 0) {
                    c.write_in_background(&shared);
                    since = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use fairshare_events::pb::{self, event::Body};

    use super::*;
    use crate::domain::JobStatus;

    fn entry(sequence: u64, subject: String, body: Body) -> LogEntry {
        LogEntry {
            sequence,
            subject,
            event: Ok(pb::Event {
                at_ms: 1_000,
                body: Some(body),
            }),
            pending: 0,
            trace: None,
            stored_ms: Some(1_000),
        }
    }

    /// A finish of cluster `c`'s job filed under cluster `b` neither ends the job nor moves
    /// the sequence its cancel must expect.
    #[tokio::test]
    async fn a_job_event_filed_under_another_cluster_changes_no_job() {
        let (_server, _js, shared) = super::super::shared::tests::fresh_shared().await;
        let submitted = fairshare_testkit::events::one_gpu_submitted("c", "a", "j", "k");
        apply(
            &shared,
            entry(1, subjects::job_event("c", "j", "job_submitted"), submitted),
        );
        let finished = || {
            Body::JobFinished(pb::JobFinished {
                job_id: "j".into(),
                exit_code: 0,
            })
        };
        apply(
            &shared,
            entry(2, subjects::job_event("b", "j", "job_finished"), finished()),
        );
        {
            let state = shared.state();
            let job = &state.jobs["j"];
            assert_eq!(job.status, JobStatus::Active);
            assert_eq!(job.last_subject_sequence, 1);
            assert_eq!(state.last_sequence, 2);
        }
        assert_eq!(shared.applied(), 2);
        // Filed under its own cluster, the finish ends it.
        apply(
            &shared,
            entry(3, subjects::job_event("c", "j", "job_finished"), finished()),
        );
        assert_ne!(shared.state().jobs["j"].status, JobStatus::Active);
    }
}
