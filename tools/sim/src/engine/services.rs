//! The in-process log and the services' folds over it.
//!
//! Where the real system appends to JetStream and each service folds what it reads, the
//! simulator appends to a vector and folds every event into the submission, accounting and
//! preemption states at once (the preemption state holds the decision service's fold, so the
//! decision cycle reads it). Sequence numbers are positions in the log, from 1, exactly as a
//! fresh JetStream stream holding only this log would number them.

use fairshare_accounting::domain::UsageFold;
use fairshare_events::pb;
use fairshare_preemption::domain::PreemptionState;
use fairshare_submission::domain::SubmissionState;

use super::EngineConfig;
use super::times::{Part, PartTimes};

/// The log and every fold of it.
pub struct Services {
    /// Every event appended, in order; sequence = index + 1.
    pub log: Vec<pb::Event>,
    /// The submission service's fold (keys, job statuses, clusters).
    pub submission: SubmissionState,
    /// The accounting service's fold (window usage, ledger).
    pub accounting: UsageFold,
    /// The preemption service's fold, holding the decision service's.
    pub preemption: PreemptionState,
    /// Wall time of each fold when [`EngineConfig::time_parts`] asks for it ([`super::times`];
    /// the engine adds its other parts here too).
    pub times: PartTimes,
}

impl Services {
    /// Empty folds for cluster `cluster`, with `config`'s window, debug allowance, share floor
    /// and hourly floor.
    pub fn new(cluster: &str, config: &EngineConfig) -> Services {
        let mut preemption = PreemptionState::new(cluster);
        preemption.set_debug_allowance_gpus(config.debug_allowance_gpus);
        preemption.set_share_floor(config.share_floor);
        preemption.set_hourly_floor(config.hourly_floor);
        Services {
            log: Vec::new(),
            submission: SubmissionState::default(),
            accounting: UsageFold::new(config.window),
            preemption,
            times: if config.time_parts {
                PartTimes::timed()
            } else {
                PartTimes::default()
            },
        }
    }

    /// The last sequence appended.
    pub fn last_sequence(&self) -> u64 {
        self.log.len() as u64
    }

    /// Appends `event` and folds it everywhere.
    pub fn append(&mut self, event: pb::Event) {
        let sequence = self.last_sequence() + 1;
        let start = self.times.start();
        self.submission.apply(sequence, &event);
        let start = self.times.add_since(Part::SubmissionFold, start);
        self.accounting.apply(sequence, &event);
        let start = self.times.add_since(Part::AccountingFold, start);
        // A service ignoring an event (a duplicate, a stale snapshot) is its own business;
        // the audit and the metrics see the log as written.
        let _ = self.preemption.apply(sequence, &event);
        self.times.add_since(Part::DecisionFold, start);
        self.log.push(event);
    }
}
