//! Keeps the submission state folded from the log.

use std::sync::Arc;

use fairshare_runtime::log::{FollowError, Follower, LogEntry};

use super::shared::Shared;
use crate::domain::Applied;

fn apply(shared: &Shared, entry: LogEntry) {
    match entry.event {
        Ok(event) => {
            let applied = shared.state().apply(entry.sequence, &event);
            if let Applied::Ignored(why) = applied {
                tracing::warn!(sequence = entry.sequence, subject = %entry.subject, "{why}");
            }
        }
        Err(e) => {
            // A malformed entry cannot be un-written; report it and fold past it so one bad
            // publisher cannot stop submissions.
            tracing::error!(sequence = entry.sequence, subject = %entry.subject, "log entry skipped: {e}");
            let mut state = shared.state();
            state.last_sequence = state.last_sequence.max(entry.sequence);
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

/// Folds new entries as they are appended, until the connection closes.
pub(super) async fn run(shared: Arc<Shared>, mut follower: Follower) -> Result<(), FollowError> {
    while let Some(entry) = follower.next().await {
        match entry {
            Ok(entry) => apply(&shared, entry),
            // The ordered consumer re-creates itself after a gap; report and go on.
            Err(e) => tracing::warn!("log follower: {e}"),
        }
    }
    Ok(())
}
