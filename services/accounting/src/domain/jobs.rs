//! The live job table: what the fold must remember about each job between its events.
//!
//! Place in the flow: `JobSubmitted` creates an entry (cluster, allocation, GPUs, whether it is
//! allocated); every later event of the job names only its id, so the fold looks the entry up
//! here to know what to charge and checks the transition against the job's state. When the job
//! ends its entry leaves this table for its cluster's [`super::ended::EndedJobs`], so this
//! table holds only queued, placed, running and preempted jobs and stays small and cache-resident.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use serde::{Deserialize, Serialize};

use super::ids::{IdHasher, KeyRef};
use super::paths::PathId;

/// Where a job stands, as far as charging is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting to start (after submission or requeue): counts as demand, charges nothing.
    Queued,
    /// Placed by the decision service, not yet started by its launcher: still demand, no
    /// charge. Kept apart from queued because a preemption order may stop it here.
    Placed,
    /// Running: charges its GPUs (if allocated) and counts as demand.
    Running,
    /// Stopped by preemption, not yet requeued: neither demand nor charge.
    Preempted,
    /// Ordered off and past its grace deadline with no stop reported yet: it counts as killed
    /// at the deadline (SPEC section 2; `PreemptionOrdered.grace_deadline_ms`), so from then on
    /// it is neither charged nor demand, and the stop that follows (a kill stamped late, after
    /// a preemption-service outage) changes nothing more.
    Overdue,
    /// Finished, failed or cancelled: nothing more happens to it (such jobs are kept in
    /// [`super::ended::EndedJobs`], not in the live table).
    Ended,
}

/// What the fold remembers about one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Index of the job's cluster in the fold.
    pub cluster: u32,
    /// The allocation it charges (meaningless for unallocated jobs).
    pub allocation: PathId,
    /// GPUs it holds while running (nodes x GPUs per node).
    pub gpus: u64,
    /// False for unallocated jobs (minimum runtime 0): they charge nothing.
    pub allocated: bool,
    /// Whether a preemption requeues it; otherwise its `JobPreempted` ends it.
    pub resumable: bool,
    /// Where it stands.
    pub state: JobState,
    /// The earliest grace deadline of the orders that stop its current run (placed or
    /// running), once it is ordered off.
    pub deadline_ms: Option<i64>,
}

type Fast<K> = HashMap<K, Job, BuildHasherDefault<IdHasher>>;

/// Live (not ended) jobs by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTable {
    uuids: Fast<u128>,
    others: Fast<String>,
}

impl JobTable {
    /// The job keyed `key`.
    pub fn get(&self, key: KeyRef<'_>) -> Option<&Job> {
        match key {
            KeyRef::Uuid(bits) => self.uuids.get(&bits),
            KeyRef::Other(id) => self.others.get(id),
        }
    }

    /// The job keyed `key`, for update.
    pub fn get_mut(&mut self, key: KeyRef<'_>) -> Option<&mut Job> {
        match key {
            KeyRef::Uuid(bits) => self.uuids.get_mut(&bits),
            KeyRef::Other(id) => self.others.get_mut(id),
        }
    }

    /// Whether a job is keyed `key`.
    pub fn contains(&self, key: KeyRef<'_>) -> bool {
        self.get(key).is_some()
    }

    /// Adds (or replaces) the job keyed `key`.
    pub fn insert(&mut self, key: KeyRef<'_>, job: Job) {
        match key {
            KeyRef::Uuid(bits) => {
                self.uuids.insert(bits, job);
            }
            KeyRef::Other(id) => {
                self.others.insert(id.to_owned(), job);
            }
        }
    }

    /// Removes the job keyed `key` (it ended).
    pub fn remove(&mut self, key: KeyRef<'_>) -> Option<Job> {
        match key {
            KeyRef::Uuid(bits) => self.uuids.remove(&bits),
            KeyRef::Other(id) => self.others.remove(id),
        }
    }

    /// Jobs remembered.
    pub fn len(&self) -> usize {
        self.uuids.len() + self.others.len()
    }

    /// Whether no job is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cluster index of every job remembered.
    pub fn clusters(&self) -> impl Iterator<Item = u32> + '_ {
        self.uuids
            .values()
            .chain(self.others.values())
            .map(|j| j.cluster)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_holds_both_kinds() {
        let job = Job {
            cluster: 0,
            allocation: 0,
            gpus: 8,
            allocated: true,
            resumable: false,
            state: JobState::Queued,
            deadline_ms: None,
        };
        let mut t = JobTable::default();
        let u = KeyRef::of("0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b");
        t.insert(u, job);
        t.insert(KeyRef::of("j1"), job);
        assert_eq!(t.len(), 2);
        assert!(t.contains(KeyRef::of("j1")));
        assert_eq!(t.remove(u), Some(job));
        assert_eq!(t.remove(KeyRef::of("j1")), Some(job));
        assert_eq!(t.remove(KeyRef::of("j1")), None);
        assert!(t.is_empty());
    }
}
