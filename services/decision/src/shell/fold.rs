//! Folding one cluster's log entries into the decision state: the one fold the live service,
//! the audit and the tests share, so they cannot disagree on what a prefix of the log means.
//!
//! Besides [`DecisionState`] the fold keeps what the shell needs to publish safely:
//!
//! - per live job, the stream sequence of its newest event (from the entry's subject,
//!   `fairshare.events.<cluster>.job.<job_id>.<kind>`): the expected last sequence over the
//!   job's scope ([`subjects::job`]) a placement is published with, so a placement never lands
//!   after anything else happened to the job (a cancel, another placement);
//! - the highest cycle number named by any `JobPlaced` in the log, so cycle numbers keep
//!   growing across restarts.
//!
//! Entries whose bytes do not decode are folded as an event without a body: they change
//! nothing but advance the last applied sequence, exactly as on every replay.

use std::collections::HashMap;

use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::log::LogEntry;

use crate::domain::{DecisionState, Ignored};

/// What applying one entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The state changed in a way that can change the next decision.
    Changed,
    /// A placement was folded: GPUs are now held, nothing was freed, so no new cycle is needed
    /// for it.
    Placed,
    /// The state refused the event (see [`Ignored`]); only the last applied sequence moved.
    Ignored(Ignored),
}

/// One cluster's decision state plus the per-job sequences placements are published against.
#[derive(Debug, Clone)]
pub struct LogFold {
    state: DecisionState,
    /// `fairshare.events.<cluster>.job.`
    job_prefix: String,
    /// Newest event sequence of each job the state holds.
    job_sequences: HashMap<String, u64>,
    /// Highest `basis.cycle` of any placement folded.
    last_cycle: u64,
}

/// An event without a body, folded in place of entries that do not decode.
const UNDECODABLE: pb::Event = pb::Event {
    at_ms: 0,
    body: None,
};

impl LogFold {
    /// An empty fold for cluster `cluster`.
    pub fn new(cluster: &str) -> Self {
        Self {
            state: DecisionState::new(cluster),
            job_prefix: format!("{}.{cluster}.job.", subjects::EVENTS_PREFIX),
            job_sequences: HashMap::new(),
            last_cycle: 0,
        }
    }

    /// The decision state.
    pub fn state(&self) -> &DecisionState {
        &self.state
    }

    /// The last stream sequence folded (0 before any).
    pub fn last_applied(&self) -> u64 {
        self.state.last_applied()
    }

    /// The highest cycle number any folded placement names (0 if none).
    pub fn last_cycle(&self) -> u64 {
        self.last_cycle
    }

    /// The sequence of the newest event folded for live job `job_id`.
    pub fn job_sequence(&self, job_id: &str) -> Option<u64> {
        self.job_sequences.get(job_id).copied()
    }

    /// The job id of a job event subject of this cluster.
    fn job_of<'a>(&self, subject: &'a str) -> Option<&'a str> {
        subject
            .strip_prefix(self.job_prefix.as_str())?
            .rsplit_once('.')
            .map(|(job, _kind)| job)
    }

    /// Folds one entry. Entries at or below the last applied sequence are refused as
    /// duplicates and change nothing at all.
    pub fn apply(&mut self, entry: &LogEntry) -> Applied {
        let event = entry.event.as_ref().unwrap_or(&UNDECODABLE);
        let result = self.state.apply(entry.sequence, event);
        if let Err(why @ Ignored::Duplicate { .. }) = result {
            return Applied::Ignored(why);
        }
        if let Some(job) = self.job_of(&entry.subject) {
            if self.state.job(job).is_some() {
                match self.job_sequences.get_mut(job) {
                    Some(s) => *s = entry.sequence,
                    None => {
                        self.job_sequences.insert(job.to_owned(), entry.sequence);
                    }
                }
            } else {
                self.job_sequences.remove(job);
            }
        }
        let placed = match &event.body {
            Some(Body::JobPlaced(p)) => {
                if let Some(b) = &p.basis {
                    self.last_cycle = self.last_cycle.max(b.cycle);
                }
                true
            }
            _ => false,
        };
        match result {
            Err(why) => Applied::Ignored(why),
            Ok(()) if placed => Applied::Placed,
            Ok(()) => Applied::Changed,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fairshare_events::DecodeError;

    fn entry(sequence: u64, subject: &str, body: Option<Body>) -> LogEntry {
        LogEntry {
            sequence,
            subject: subject.to_owned(),
            event: Ok(pb::Event { at_ms: 5, body }),
            pending: 0,
        }
    }

    fn submitted(job: &str) -> Body {
        Body::JobSubmitted(pb::JobSubmitted {
            job_id: job.into(),
            spec: Some(pb::JobSpec {
                cluster: "c".into(),
                allocation: "a".into(),
                gpus: 1,
                min_runtime_s: 60,
                ..Default::default()
            }),
            shape: Some(pb::Shape {
                nodes: 1,
                gpus_per_node: 1,
            }),
            ..Default::default()
        })
    }

    #[test]
    fn tracks_each_live_jobs_newest_sequence_and_forgets_ended_jobs() {
        let mut f = LogFold::new("c");
        let s = |j: &str, k: &str| subjects::job_event("c", j, k);
        assert_eq!(
            f.apply(&entry(3, &s("j1", "job_submitted"), Some(submitted("j1")))),
            Applied::Changed
        );
        assert_eq!(f.job_sequence("j1"), Some(3));
        let placed = Body::JobPlaced(pb::JobPlaced {
            job_id: "j1".into(),
            nodes: vec![pb::NodeGpus {
                node: "n".into(),
                gpus: 1,
            }],
            basis: Some(pb::DecisionBasis {
                through_sequence: 3,
                computed_at_ms: 5,
                cycle: 41,
            }),
        });
        assert_eq!(
            f.apply(&entry(7, &s("j1", "job_placed"), Some(placed))),
            Applied::Placed
        );
        assert_eq!(f.job_sequence("j1"), Some(7));
        assert_eq!(f.last_cycle(), 41);
        // A refused event on the job's subject still moves the job's scope.
        let again = Body::JobRequeued(pb::JobRequeued {
            job_id: "j1".into(),
        });
        assert!(matches!(
            f.apply(&entry(8, &s("j1", "job_requeued"), Some(again))),
            Applied::Ignored(Ignored::WrongStatus { .. })
        ));
        assert_eq!(f.job_sequence("j1"), Some(8));
        let done = Body::JobFinished(pb::JobFinished {
            job_id: "j1".into(),
            exit_code: 0,
        });
        assert_eq!(
            f.apply(&entry(9, &s("j1", "job_finished"), Some(done))),
            Applied::Changed
        );
        assert_eq!(f.job_sequence("j1"), None);
        // Redeliveries change nothing.
        assert!(matches!(
            f.apply(&entry(9, &s("j2", "job_submitted"), Some(submitted("j2")))),
            Applied::Ignored(Ignored::Duplicate { .. })
        ));
        assert_eq!(f.job_sequence("j2"), None);
        assert_eq!(f.last_applied(), 9);
    }

    #[test]
    fn undecodable_entries_advance_the_sequence_only() {
        let mut f = LogFold::new("c");
        let bad = LogEntry {
            sequence: 4,
            subject: "fairshare.events.c.policy".into(),
            event: Err(DecodeError::Empty {
                expected: "fairshare.v1.Event",
            }),
            pending: 0,
        };
        assert_eq!(f.apply(&bad), Applied::Ignored(Ignored::NoBody));
        assert_eq!(f.last_applied(), 4);
    }
}
