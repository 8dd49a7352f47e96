//! The allocated work in flight indexed by start time, with per-allocation GPU totals.
//!
//! Place in the flow: [`DecisionState`](super::state::DecisionState) keeps it in step with its
//! in-flight list (every hold and release), and rebuilds it when a checkpoint is loaded (it is
//! derived, never checkpointed). Two hot questions read it instead of walking every running
//! job:
//! - ranking inputs ([`super::rank::leaf_usage`]): a run that started before both the usage
//!   snapshot's window end and the longest minimum runtime in flight adds exactly
//!   `gpus x (now - window end)`, unless ordered off with a deadline already past, so per
//!   allocation only the GPU total, the runs started since and the runs ordered off are read;
//! - the preemption service's next wake-up: only a run started within the longest minimum
//!   runtime can still be protected.
//!
//! On a busy cluster most running work started long ago: the recent part is a small share of
//! it.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::state::InFlight;

/// One allocation's work in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AllocationFlight {
    /// GPUs of all its runs.
    pub gpus: u128,
    /// GPUs of its runs not ordered off.
    pub held: u64,
    /// Its runs sorted by `(start, job id)`. A vector: new runs start now, so they go at or
    /// near its end, and the recent part read by every ranking is one contiguous slice.
    by_start: Vec<(i64, Arc<str>, InFlight)>,
    /// Its runs ordered off, by job id: charged to their deadline at most (a handful at a
    /// time: victims stop within their grace).
    pub stopping: BTreeMap<Arc<str>, InFlight>,
}

impl AllocationFlight {
    /// Its runs that started after `after`, oldest first.
    pub fn started_after(&self, after: i64) -> impl Iterator<Item = &InFlight> {
        let first = self
            .by_start
            .partition_point(|(start, _, _)| *start <= after);
        self.by_start[first..].iter().map(|(_, _, run)| run)
    }

    /// Where the run of `job` that started at `start_ms` is, or would go.
    fn position(&self, start_ms: i64, job: &str) -> Result<usize, usize> {
        self.by_start
            .binary_search_by(|(start, id, _)| (*start, &**id).cmp(&(start_ms, job)))
    }
}

/// Every allocation's work in flight, and the minimum runtimes declared by it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FlightIndex {
    /// By allocation path (allocations with work in flight only).
    pub by_allocation: BTreeMap<Arc<str>, AllocationFlight>,
    /// How many runs declare each minimum runtime.
    min_runtimes: BTreeMap<i64, usize>,
}

impl FlightIndex {
    /// Adds job `job`'s run of allocation `allocation`.
    pub fn insert(&mut self, allocation: &Arc<str>, job: &Arc<str>, run: InFlight) {
        let a = self
            .by_allocation
            .entry(Arc::clone(allocation))
            .or_default();
        a.gpus = a.gpus.saturating_add(u128::from(run.gpus));
        if !run.stopping() {
            a.held = a.held.saturating_add(run.gpus);
        }
        if run.stopping() {
            a.stopping.insert(Arc::clone(job), run);
        } else {
            a.stopping.remove(job);
        }
        match a.position(run.start_ms, job) {
            Ok(i) => {
                // Never happens (a job is released before it is held again); keep the totals
                // true if it did.
                let old = std::mem::replace(&mut a.by_start[i].2, run);
                a.gpus = a.gpus.saturating_sub(u128::from(old.gpus));
                if !old.stopping() {
                    a.held = a.held.saturating_sub(old.gpus);
                }
                self.forget_min_runtime(old.min_runtime_ms);
            }
            Err(i) => a.by_start.insert(i, (run.start_ms, Arc::clone(job), run)),
        }
        *self.min_runtimes.entry(run.min_runtime_ms).or_insert(0) += 1;
    }

    /// Removes job `job`'s run of allocation `allocation`, as it was inserted.
    pub fn remove(&mut self, allocation: &str, job: &Arc<str>, run: &InFlight) {
        let Some(a) = self.by_allocation.get_mut(allocation) else {
            return;
        };
        let Ok(i) = a.position(run.start_ms, job) else {
            return;
        };
        let (_, _, old) = a.by_start.remove(i);
        a.stopping.remove(job);
        a.gpus = a.gpus.saturating_sub(u128::from(old.gpus));
        if !old.stopping() {
            a.held = a.held.saturating_sub(old.gpus);
        }
        if a.by_start.is_empty() {
            self.by_allocation.remove(allocation);
        }
        self.forget_min_runtime(old.min_runtime_ms);
    }

    fn forget_min_runtime(&mut self, min_runtime_ms: i64) {
        if let Some(n) = self.min_runtimes.get_mut(&min_runtime_ms) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.min_runtimes.remove(&min_runtime_ms);
            }
        }
    }

    /// The longest minimum runtime any run in flight declares.
    pub fn longest_min_runtime(&self) -> Option<i64> {
        self.min_runtimes.keys().next_back().copied()
    }

    /// The shortest minimum runtime any run in flight declares.
    pub fn shortest_min_runtime(&self) -> Option<i64> {
        self.min_runtimes.keys().next().copied()
    }

    /// Every run that started after `after`, by allocation, oldest first within each.
    pub fn started_after(&self, after: i64) -> impl Iterator<Item = &InFlight> {
        self.by_allocation
            .values()
            .flat_map(move |a| a.started_after(after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(gpus: u64, start_ms: i64, min_runtime_ms: i64, stopping: bool) -> InFlight {
        InFlight {
            gpus,
            start_ms,
            min_runtime_ms,
            deadline_ms: stopping.then_some(start_ms + 30_000),
        }
    }

    #[test]
    fn totals_and_recent_runs_follow_inserts_and_removes() {
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("org/a"), Arc::from("org/b"));
        let ids: Vec<Arc<str>> = ["j1", "j2", "j3", "j4"].map(Arc::from).to_vec();
        let mut index = FlightIndex::default();
        index.insert(&a, &ids[0], run(8, 100, 60, false));
        index.insert(&a, &ids[1], run(4, 200, 600, true));
        index.insert(&a, &ids[2], run(2, 200, 60, false));
        index.insert(&b, &ids[3], run(1, 50, 30, false));
        let fa = &index.by_allocation[&a];
        assert_eq!(
            (fa.gpus, fa.held),
            (14, 10),
            "a stopping run counts in gpus only"
        );
        let recent: Vec<i64> = fa.started_after(100).map(|r| r.start_ms).collect();
        assert_eq!(recent, vec![200, 200], "strictly after");
        assert_eq!(fa.started_after(i64::MAX).count(), 0);
        assert_eq!(fa.started_after(i64::MIN).count(), 3);
        assert_eq!(index.started_after(60).count(), 3);
        assert_eq!(index.longest_min_runtime(), Some(600));
        assert_eq!(index.shortest_min_runtime(), Some(30));

        index.remove(&a, &ids[1], &run(4, 200, 600, true));
        assert_eq!(index.longest_min_runtime(), Some(60));
        assert_eq!(
            (index.by_allocation[&a].gpus, index.by_allocation[&a].held),
            (10, 10)
        );
        index.remove(&b, &ids[3], &run(1, 50, 30, false));
        assert!(
            !index.by_allocation.contains_key(&b),
            "an empty allocation goes"
        );
        assert_eq!(index.shortest_min_runtime(), Some(60));
        // Removing what is not there changes nothing.
        index.remove(&b, &ids[3], &run(1, 50, 30, false));
        index.remove(&a, &ids[0], &run(8, 101, 60, false));
        assert_eq!(index.by_allocation[&a].gpus, 10);
    }
}
