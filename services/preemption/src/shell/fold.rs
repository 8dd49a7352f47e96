//! Folding one cluster's log entries into the preemption state, plus what the shell needs to
//! publish safely: the stream sequence of each live job's newest event (the expected last
//! sequence over the job's subjects), each node's newest event (also in the message id of its
//! `NodeDrained`), and the highest cycle named by any
//! `PreemptionOrdered` folded (so cycle numbers keep growing across restarts), and each live
//! job's newest W3C trace context (the parent of an order's span, kept across restarts from a
//! checkpoint).
//!
//! Entries whose bytes do not decode are folded as an event without a body: they change nothing
//! but advance the last applied sequence, exactly as on every replay.

use std::collections::HashMap;

use fairshare_events::headers::TraceParent;
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::log::LogEntry;
use serde::{Deserialize, Serialize};

use fairshare_decision::domain::Ignored;

use crate::domain::PreemptionState;

/// An event without a body, folded in place of entries that do not decode.
const UNDECODABLE: pb::Event = pb::Event {
    at_ms: 0,
    body: None,
};

/// One cluster's preemption state plus the per-job and per-node sequences.
///
/// Serializable for the shell's sled checkpoint: a fold restored from its bytes and then fed
/// the rest of the log equals the fold that was fed the whole log (see the tests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellFold {
    state: PreemptionState,
    /// `fairshare.events.<cluster>.job.`
    job_prefix: String,
    /// `fairshare.events.<cluster>.node.`
    node_prefix: String,
    job_sequences: HashMap<String, u64>,
    node_sequences: HashMap<String, u64>,
    last_cycle: u64,
    /// Each live job's trace context: that of the newest event the state took for it.
    traces: HashMap<String, TraceParent>,
}

impl ShellFold {
    /// An empty fold for `cluster` that takes usage snapshots of any window.
    pub fn new(cluster: &str) -> Self {
        Self::with_usage_window(cluster, None)
    }

    /// An empty fold for `cluster` that takes usage snapshots of a `usage_window_ms` window
    /// only ([`PreemptionState::set_usage_window_ms`]; `None`: any).
    pub fn with_usage_window(cluster: &str, usage_window_ms: Option<i64>) -> Self {
        let mut state = PreemptionState::new(cluster);
        state.set_usage_window_ms(usage_window_ms);
        Self {
            state,
            job_prefix: format!("{}.{cluster}.job.", subjects::EVENTS_PREFIX),
            node_prefix: format!("{}.{cluster}.node.", subjects::EVENTS_PREFIX),
            job_sequences: HashMap::new(),
            node_sequences: HashMap::new(),
            last_cycle: 0,
            traces: HashMap::new(),
        }
    }

    /// The cluster this fold follows.
    pub fn cluster(&self) -> &str {
        self.state.cluster()
    }

    /// Whether this fold is one [`ShellFold::new`]`(cluster)` would start: same cluster, same
    /// job and node subject prefixes. A checkpoint that is not is not used.
    pub fn is_for(&self, cluster: &str) -> bool {
        self.state.cluster() == cluster
            && self.job_prefix == format!("{}.{cluster}.job.", subjects::EVENTS_PREFIX)
            && self.node_prefix == format!("{}.{cluster}.node.", subjects::EVENTS_PREFIX)
    }

    /// Sets the usage window of a fold loaded from a checkpoint (the setting is not
    /// checkpointed; the checkpoint's kind names it, see [`super::checkpoint_kind`]).
    pub fn set_usage_window_ms(&mut self, usage_window_ms: Option<i64>) {
        self.state.set_usage_window_ms(usage_window_ms);
    }

    /// The trace context of live job `job_id`'s newest traced entry.
    pub fn job_trace(&self, job_id: &str) -> Option<TraceParent> {
        self.traces.get(job_id).copied()
    }

    /// The domain state.
    pub fn state(&self) -> &PreemptionState {
        &self.state
    }

    /// The last stream sequence applied.
    pub fn last_applied(&self) -> u64 {
        self.state.last_applied()
    }

    /// Highest `basis.cycle` of any `PreemptionOrdered` folded.
    pub fn last_cycle(&self) -> u64 {
        self.last_cycle
    }

    /// Sequence of the newest event of live job `job_id`.
    pub fn job_sequence(&self, job_id: &str) -> Option<u64> {
        self.job_sequences.get(job_id).copied()
    }

    /// Sequence of the newest event on node `node`'s subject (0: none).
    pub fn node_sequence(&self, node: &str) -> u64 {
        self.node_sequences.get(node).copied().unwrap_or(0)
    }

    /// Folds one entry; `true` if the domain state accepted it (a refused event only moves the
    /// last applied sequence, and a duplicate changes nothing at all).
    pub fn apply(&mut self, entry: &LogEntry) -> bool {
        self.apply_checked(entry).is_ok()
    }

    /// [`ShellFold::apply`], saying why an entry was refused (the service warns of a usage
    /// snapshot of another window).
    pub fn apply_checked(&mut self, entry: &LogEntry) -> Result<(), Ignored> {
        let event = entry.event.as_ref().unwrap_or(&UNDECODABLE);
        let result = self
            .state
            .apply_stored(entry.sequence, event, entry.stored_ms);
        if let Err(why @ Ignored::Duplicate { .. }) = result {
            return Err(why);
        }
        if let Some(job) = entry
            .subject
            .strip_prefix(self.job_prefix.as_str())
            .and_then(|rest| rest.rsplit_once('.'))
            .map(|(job, _kind)| job)
        {
            if self.state.decision().job(job).is_some() {
                self.job_sequences.insert(job.to_owned(), entry.sequence);
                // The newest event the state took is the job's context; a refused one is not.
                if let (Ok(()), Some(trace)) = (&result, entry.trace) {
                    self.traces.insert(job.to_owned(), trace);
                }
            } else {
                self.job_sequences.remove(job);
                self.traces.remove(job);
            }
        } else if let Some(node) = entry.subject.strip_prefix(self.node_prefix.as_str()) {
            self.node_sequences.insert(node.to_owned(), entry.sequence);
        }
        if let Some(Body::PreemptionOrdered(p)) = &event.body
            && let Some(b) = &p.basis
        {
            self.last_cycle = self.last_cycle.max(b.cycle);
        }
        result
    }
}

impl fairshare_decision::shell::window::WindowFold for ShellFold {
    fn for_window(cluster: &str, usage_window_ms: Option<i64>) -> Self {
        ShellFold::with_usage_window(cluster, usage_window_ms)
    }

    fn fold(&mut self, entry: &LogEntry) {
        self.apply(entry);
    }
}

impl fairshare_runtime::checkpoint::Resumable for ShellFold {
    fn last_applied(&self) -> u64 {
        ShellFold::last_applied(self)
    }

    fn is_for(&self, cluster: &str) -> bool {
        ShellFold::is_for(self, cluster)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::domain::{Config, decide_preemptions};
    use crate::shell::testlog::generated_log;

    fn fold(entries: &[LogEntry], into: &mut ShellFold) {
        for e in entries {
            into.apply(e);
        }
    }

    #[test]
    fn event_times_are_held_to_a_minute_after_the_stream_stored_them() {
        use fairshare_events::subjects;
        use fairshare_model::logtime::MAX_AHEAD_OF_LOG_MS;
        let mut f = ShellFold::new("c");
        let stored = 1_800_000_000_000;
        let day = 86_400_000;
        let mut sequence = 0;
        let mut feed = |f: &mut ShellFold, subject: String, at_ms: i64, body: Body| {
            sequence += 1;
            f.apply(&LogEntry {
                stored_ms: Some(stored),
                ..fairshare_testkit::events::logged(sequence, subject, at_ms, body)
            })
        };
        let job = |kind: &str| subjects::job_event("c", "j", kind);
        assert!(feed(
            &mut f,
            subjects::node("c", "n0"),
            stored,
            Body::NodeRegistered(pb::NodeRegistered {
                cluster: "c".into(),
                node: "n0".into(),
                gpus: 8,
            }),
        ));
        assert!(feed(
            &mut f,
            job("job_submitted"),
            stored,
            fairshare_testkit::events::shaped_submitted("c", "a", "j", 1, 8, 1800),
        ));
        assert!(feed(
            &mut f,
            job("job_placed"),
            stored,
            Body::JobPlaced(pb::JobPlaced {
                job_id: "j".into(),
                nodes: vec![pb::NodeGpus {
                    node: "n0".into(),
                    gpus: 8,
                }],
                basis: None,
            }),
        ));
        // The launcher's clock runs a day ahead.
        assert!(feed(
            &mut f,
            job("job_started"),
            stored + day,
            Body::JobStarted(pb::JobStarted { job_id: "j".into() }),
        ));
        assert!(feed(
            &mut f,
            job("preemption_ordered"),
            stored + day,
            Body::PreemptionOrdered(pb::PreemptionOrdered {
                job_id: "j".into(),
                grace_deadline_ms: stored + 30_000,
                ..Default::default()
            }),
        ));
        let held = f
            .state()
            .decision()
            .load("n0")
            .unwrap()
            .holding("j")
            .unwrap();
        assert_eq!(held.holder.start_ms, stored + MAX_AHEAD_OF_LOG_MS);
        assert_eq!(
            f.state().orders()["j"].ordered_at_ms,
            stored + MAX_AHEAD_OF_LOG_MS
        );
    }

    #[test]
    fn a_fold_restored_from_its_bytes_and_fed_the_rest_equals_the_full_fold() {
        let log = generated_log();
        let count = |f: fn(&Body) -> bool| {
            log.iter()
                .filter(|e| {
                    e.event
                        .as_ref()
                        .ok()
                        .and_then(|e| e.body.as_ref())
                        .is_some_and(f)
                })
                .count()
        };
        // The log exercises what the checkpoint must carry.
        assert!(count(|b| matches!(b, Body::PreemptionOrdered(_))) > 0);
        assert!(count(|b| matches!(b, Body::JobPreempted(p) if p.killed)) > 0);
        assert!(count(|b| matches!(b, Body::JobRequeued(_))) > 0);
        assert!(count(|b| matches!(b, Body::NodeDrained(_))) > 0);
        let mut whole = ShellFold::new("c");
        fold(&log, &mut whole);
        assert_eq!(whole.last_applied(), log.len() as u64);
        let config = Config::default();
        let end_ms = 80 * 20_000;
        for split in [1, log.len() / 3, log.len() / 2, log.len() - 1] {
            let mut before = ShellFold::new("c");
            fold(&log[..split], &mut before);
            assert!(
                split == 1 || !before.traces.is_empty(),
                "live jobs' contexts"
            );
            let bytes = bincode::serialize(&before).unwrap();
            let mut restored: ShellFold = bincode::deserialize(&bytes).unwrap();
            assert_eq!(restored, before, "split at {split}");
            assert!(restored.is_for("c") && !restored.is_for("d"));
            fold(&log[split..], &mut before);
            fold(&log[split..], &mut restored);
            assert_eq!(restored, before, "split at {split}");
            assert_eq!(restored, whole, "split at {split}");
            for now in [end_ms, end_ms + 30_000, end_ms + 3_600_000] {
                assert_eq!(
                    decide_preemptions(restored.state(), now, &config),
                    decide_preemptions(whole.state(), now, &config),
                    "split at {split}, now {now}"
                );
            }
        }
    }
}
