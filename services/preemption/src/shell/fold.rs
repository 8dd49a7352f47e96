//! Folding one cluster's log entries into the preemption state, plus what the shell needs to
//! publish safely: the stream sequence of each live job's newest event (the expected last
//! sequence over the job's subjects), each node's newest event and the sequence of its last
//! cordon (the message id of its `NodeDrained`), and the highest cycle named by any
//! `PreemptionOrdered` folded (so cycle numbers keep growing across restarts).
//!
//! Entries whose bytes do not decode are folded as an event without a body: they change nothing
//! but advance the last applied sequence, exactly as on every replay.

use std::collections::HashMap;

use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::log::LogEntry;

use fairshare_decision::domain::Ignored;

use crate::domain::PreemptionState;

/// An event without a body, folded in place of entries that do not decode.
const UNDECODABLE: pb::Event = pb::Event {
    at_ms: 0,
    body: None,
};

/// One cluster's preemption state plus the per-job and per-node sequences.
#[derive(Debug, Clone)]
pub struct ShellFold {
    state: PreemptionState,
    /// `fairshare.events.<cluster>.job.`
    job_prefix: String,
    /// `fairshare.events.<cluster>.node.`
    node_prefix: String,
    job_sequences: HashMap<String, u64>,
    node_sequences: HashMap<String, u64>,
    cordon_sequences: HashMap<String, u64>,
    last_cycle: u64,
}

impl ShellFold {
    /// An empty fold for `cluster`.
    pub fn new(cluster: &str) -> Self {
        Self {
            state: PreemptionState::new(cluster),
            job_prefix: format!("{}.{cluster}.job.", subjects::EVENTS_PREFIX),
            node_prefix: format!("{}.{cluster}.node.", subjects::EVENTS_PREFIX),
            job_sequences: HashMap::new(),
            node_sequences: HashMap::new(),
            cordon_sequences: HashMap::new(),
            last_cycle: 0,
        }
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

    /// Sequence of node `node`'s last `NodeCordoned` (0: none folded).
    pub fn cordon_sequence(&self, node: &str) -> u64 {
        self.cordon_sequences.get(node).copied().unwrap_or(0)
    }

    /// Folds one entry; `true` if the domain state accepted it (a refused event only moves the
    /// last applied sequence, and a duplicate changes nothing at all).
    pub fn apply(&mut self, entry: &LogEntry) -> bool {
        let event = entry.event.as_ref().unwrap_or(&UNDECODABLE);
        let result = self.state.apply(entry.sequence, event);
        if let Err(Ignored::Duplicate { .. }) = result {
            return false;
        }
        if let Some(job) = entry
            .subject
            .strip_prefix(self.job_prefix.as_str())
            .and_then(|rest| rest.rsplit_once('.'))
            .map(|(job, _kind)| job)
        {
            if self.state.decision().job(job).is_some() {
                self.job_sequences.insert(job.to_owned(), entry.sequence);
            } else {
                self.job_sequences.remove(job);
            }
        } else if let Some(node) = entry.subject.strip_prefix(self.node_prefix.as_str()) {
            self.node_sequences.insert(node.to_owned(), entry.sequence);
            if let Some(Body::NodeCordoned(_)) = &event.body {
                self.cordon_sequences
                    .insert(node.to_owned(), entry.sequence);
            }
        }
        if let Some(Body::PreemptionOrdered(p)) = &event.body
            && let Some(b) = &p.basis
        {
            self.last_cycle = self.last_cycle.max(b.cycle);
        }
        if let Err(why) = &result {
            tracing::debug!(sequence = entry.sequence, subject = %entry.subject, "not folded: {why}");
        }
        result.is_ok()
    }
}
