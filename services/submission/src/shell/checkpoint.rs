//! The submission service's sled checkpoint: its folded state and the last sequence applied.
//!
//! Place in the flow: without one, every start folds the whole log (every job and key ever
//! submitted) before it answers a request; with one (`--checkpoint-dir`), a start folds only
//! what came after it. It is a cache: delete the directory and the next start folds the log
//! from the beginning to the same state. A checkpoint of another incarnation of the stream
//! (its creation time is in the tag), of another format, or past the log's end is not used.
//! Several instances in the queue group each need a directory of their own.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fairshare_runtime::checkpoint::{CheckpointError, CheckpointStore, Resumable};
use fairshare_runtime::log::LogPosition;

use super::shared::Shared;
use crate::domain::SubmissionState;

/// Format version of the checkpoint; bump it when the state's serde form changes, or what it
/// folds (older checkpoints are then refused and rebuilt from the log). 4: events on a subject
/// they do not belong to are folded as empty. 5: so are job events filed under another
/// cluster than their job's. 6: an accepted key keeps its request's fingerprint. 7: a job
/// record says whether the job holds a placement (only then is a preemption folded). 8: a
/// job's first end stands (a later end or cancel is not folded). 9: only a key's outcome
/// schedules its forgetting (older checkpoints may hold forgettings due from later entries).
/// 10: the state names when its last entry was stored.
const VERSION: u32 = 10;

/// The scope a checkpoint is for: the service serves every cluster.
const SCOPE: &str = "all-clusters";

impl Resumable for SubmissionState {
    fn last_applied(&self) -> u64 {
        self.last_sequence
    }

    fn is_for(&self, scope: &str) -> bool {
        scope == SCOPE
    }
}

/// Opens the store in `dir` for the stream at `log`.
pub(super) fn open(dir: &Path, log: &LogPosition) -> Result<CheckpointStore, CheckpointError> {
    CheckpointStore::open(
        dir,
        &log.checkpoint_kind("fairshare-submission/SubmissionState"),
        VERSION,
    )
}

/// The state to start from: the checkpoint's if it can be used on the log `js` reads (see
/// [`CheckpointStore::resume_on_log`]), else an empty one.
pub(super) async fn resume(
    store: Option<&CheckpointStore>,
    log: &LogPosition,
    js: &async_nats::jetstream::Context,
) -> SubmissionState {
    match store {
        Some(s) => s
            .resume_on_log::<SubmissionState>(SCOPE, log.end, js)
            .await
            .map(|(state, _)| state)
            .unwrap_or_default(),
        None => SubmissionState::default(),
    }
}

/// The store and the cadence the follower writes on.
///
/// A copy of the state is taken under the state's lock (a clone: requests wait that long) and
/// written on a blocking thread, so neither requests nor the fold wait for the encoding and
/// the disk. Writes never overlap and never go back to an older sequence.
///
/// The shell notes an accepted submission before the fold applies it, so the state at `L` may
/// hold a key accepted at `S > L`. A checkpoint leaves such keys out
/// ([`SubmissionState::drop_noted_ahead`]): a restart folds `S` again if the log still holds
/// it, and a log that lost it (a server back from a power cut without its newest entries)
/// leaves no answer for a job that is not there.
#[derive(Clone)]
pub(super) struct Checkpoints {
    store: Arc<CheckpointStore>,
    /// The sequence of the newest write; held while writing.
    written: Arc<Mutex<u64>>,
    /// A background write is running: the next one is skipped rather than queued.
    busy: Arc<AtomicBool>,
    /// Write after this many applied entries...
    pub every_events: u64,
    /// ...or on this timer, when entries came since the last.
    pub every: Duration,
}

impl Checkpoints {
    /// Writes to `store` on the given cadence.
    pub fn new(store: Arc<CheckpointStore>, every_events: u64, every: Duration) -> Self {
        Self {
            store,
            written: Arc::new(Mutex::new(0)),
            busy: Arc::new(AtomicBool::new(false)),
            every_events: every_events.max(1),
            every: every.max(Duration::from_millis(100)),
        }
    }

    /// Writes the state now, on this thread (after catch-up, and at a stop: after any
    /// background write, which it waits for).
    pub fn write_now(&self, shared: &Shared) {
        let state = shared.state().clone();
        self.write(state);
    }

    /// Writes the state on a blocking thread, unless a write is running.
    pub fn write_in_background(&self, shared: &Shared) {
        if self.busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let state = shared.state().clone();
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            this.write(state);
            this.busy.store(false, Ordering::Release);
        });
    }

    fn write(&self, mut state: SubmissionState) {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if state.last_sequence < *written {
            return;
        }
        state.drop_noted_ahead();
        save(&self.store, &state);
        *written = state.last_sequence;
    }
}

/// Writes `state`. A failed write is reported and otherwise ignored: the checkpoint is only a
/// cache.
fn save(store: &CheckpointStore, state: &SubmissionState) {
    match store.save_at(state.last_sequence, state.last_stored_ms, state) {
        Ok(()) => tracing::debug!(sequence = state.last_sequence, "checkpoint written"),
        Err(e) => tracing::warn!(
            sequence = state.last_sequence,
            "checkpoint not written: {e}"
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use fairshare_events::pb::{self, event::Body};

    use super::*;

    fn event(body: Body) -> pb::Event {
        pb::Event {
            at_ms: 1_000,
            body: Some(body),
        }
    }

    /// A state with a tree, nodes, an accepted job, a cancellation and a logged rejection.
    fn folded() -> SubmissionState {
        let mut s = SubmissionState::default();
        let bodies = [
            Body::BudgetTreeSet(pb::BudgetTreeSet {
                cluster: "c".into(),
                accounts: vec![pb::Account {
                    name: "lab".into(),
                    share: 1,
                    children: vec![pb::Account {
                        name: "a".into(),
                        share: 1,
                        children: vec![],
                    }],
                }],
            }),
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: "c".into(),
                node: "n1".into(),
                gpus: 8,
            }),
            Body::JobSubmitted(pb::JobSubmitted {
                job_id: "j".into(),
                idempotency_key: "k1".into(),
                spec: Some(pb::JobSpec {
                    cluster: "c".into(),
                    allocation: "lab/a".into(),
                    gpus: 1,
                    resumable: true,
                    ..Default::default()
                }),
                shape: None,
            }),
            Body::JobCancelled(pb::JobCancelled {
                job_id: "j".into(),
                ..Default::default()
            }),
            Body::JobRejected(pb::JobRejected {
                idempotency_key: "k2".into(),
                cluster: "c".into(),
                rejection: Some(pb::Rejection {
                    code: pb::RejectionCode::InvalidGpus as i32,
                    message: "gpus must be positive".into(),
                }),
                intake_sequence: 9,
            }),
        ];
        for (i, b) in bodies.into_iter().enumerate() {
            s.apply(i as u64 + 1, &event(b));
        }
        s
    }

    #[test]
    fn a_checkpoint_gives_back_the_state_it_was_written_from() {
        let dir = tempfile::tempdir().unwrap();
        let log = LogPosition {
            end: 5,
            created_ns: 42,
        };
        let state = folded();
        assert_eq!(state.last_sequence, 5);
        assert!(state.clusters["c"].budget.is_some());
        let store = open(dir.path(), &log).unwrap();
        save(&store, &state);
        // (The stored-time check against the log is the runtime's, tested there.)
        let resume = |store: &CheckpointStore, log: &LogPosition| {
            store
                .resume::<SubmissionState>(SCOPE, log.end)
                .unwrap_or_default()
        };
        assert_eq!(resume(&store, &log), state);
        // Past the log's end (another incarnation of the stream): not used.
        let shorter = LogPosition {
            end: 4,
            created_ns: 42,
        };
        assert_eq!(resume(&store, &shorter), SubmissionState::default());
        assert!(
            store.load::<SubmissionState>().unwrap().is_none(),
            "removed"
        );
        save(&store, &state);
        drop(store);
        // Another stream (its creation time is in the tag): not used either.
        let other = LogPosition {
            end: 5,
            created_ns: 43,
        };
        let store = open(dir.path(), &other).unwrap();
        assert_eq!(resume(&store, &other), SubmissionState::default());
    }

    /// An acceptance the shell noted ahead of the fold is left out of the checkpoint: resumed
    /// on a log that lost it, the key would answer for a job the log does not hold.
    #[test]
    fn a_checkpoint_leaves_out_acceptances_noted_ahead_of_the_fold() {
        let dir = tempfile::tempdir().unwrap();
        let log = LogPosition {
            end: 5,
            created_ns: 42,
        };
        let folded = folded();
        let mut noted = folded.clone();
        noted.note_accepted("k-ahead", "j-ahead", "c", 9, 7);
        assert!(noted.keys.contains_key("k-ahead"));
        let store = Arc::new(open(dir.path(), &log).unwrap());
        Checkpoints::new(Arc::clone(&store), 1, Duration::from_secs(1)).write(noted);
        let resumed = store.resume::<SubmissionState>(SCOPE, log.end).unwrap();
        assert_eq!(
            resumed, folded,
            "the key and job noted at 9 left out, the rest kept"
        );
    }
}
