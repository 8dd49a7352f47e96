//! Keeps the submission state folded from the log, and checkpoints it on the cadence.

use std::sync::Arc;

use fairshare_events::subjects;
use fairshare_runtime::log::{FollowError, Follower, LogEntry};

use super::checkpoint::Checkpoints;
use super::shared::Shared;
use crate::domain::Applied;

fn apply(shared: &Shared, entry: LogEntry) {
    {
        let mut state = shared.state();
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
                state.last_sequence = state.last_sequence.max(entry.sequence);
                if let Some(stored_ms) = entry.stored_ms {
                    state.advance_log_time(stored_ms);
                }
            }
        }
        // Whatever the entry said, it is the newest on its job's subject: a cancel must expect
        // it, or every cancel of that job would be refused until the job's next good event.
        if let Some((job_id, _kind)) = subjects::job_event_parts(&entry.subject) {
            state.note_job_subject(job_id, entry.sequence);
        }
    }
    shared.set_applied(entry.sequence);
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
                    // The ordered consumer re-creates itself after a gap; report and go on.
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
