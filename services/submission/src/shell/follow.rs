//! Keeps the submission state folded from the log, and checkpoints it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fairshare_events::subjects;
use fairshare_runtime::checkpoint::CheckpointStore;
use fairshare_runtime::log::{FollowError, Follower, LogEntry};

use super::checkpoint;
use super::shared::Shared;
use crate::domain::Applied;

/// The checkpoint store and how often the follower writes to it.
#[derive(Clone)]
pub(super) struct Checkpoints {
    /// The store (shared with the final write at shutdown).
    pub store: Arc<CheckpointStore>,
    /// Write after this many applied entries...
    pub every_events: u64,
    /// ...or this long after the last write, whichever comes first.
    pub every: Duration,
}

impl Checkpoints {
    /// Writes a copy of the state, taken under the lock and written outside it.
    pub fn write(&self, shared: &Shared) {
        let state = shared.state().clone();
        checkpoint::save(&self.store, &state);
    }
}

fn apply(shared: &Shared, entry: LogEntry) {
    {
        let mut state = shared.state();
        match &entry.event {
            Ok(event) => {
                let applied = state.apply(entry.sequence, event);
                if let Applied::Ignored(why) = applied {
                    tracing::warn!(sequence = entry.sequence, subject = %entry.subject, "{why}");
                }
            }
            Err(e) => {
                // A malformed entry cannot be un-written; report it and fold past it so one bad
                // publisher cannot stop submissions.
                tracing::error!(sequence = entry.sequence, subject = %entry.subject, "log entry skipped: {e}");
                state.last_sequence = state.last_sequence.max(entry.sequence);
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

/// Folds new entries as they are appended, until the connection closes, checkpointing on the
/// cadence if a store is configured.
pub(super) async fn run(
    shared: Arc<Shared>,
    mut follower: Follower,
    checkpoints: Option<Checkpoints>,
) -> Result<(), FollowError> {
    let mut since = 0u64;
    let mut written_at = Instant::now();
    while let Some(entry) = follower.next().await {
        match entry {
            Ok(entry) => apply(&shared, entry),
            // The ordered consumer re-creates itself after a gap; report and go on.
            Err(e) => tracing::warn!("log follower: {e}"),
        }
        if let Some(c) = &checkpoints {
            since += 1;
            if since >= c.every_events || written_at.elapsed() >= c.every {
                c.write(&shared);
                since = 0;
                written_at = Instant::now();
            }
        }
    }
    Ok(())
}
