//! The simulated launcher: runs placed jobs for the time they need and stops them when told.
//!
//! It stands where the real launcher stands in the event flow: it confirms placements with
//! `JobStarted` at once, reports `JobFinished` when a job's remaining work is done, and confirms
//! a `PreemptionOrdered` with `JobPreempted` after the job's stop delay. A resumable job
//! keeps the work up to its last checkpoint across a preemption; any other job loses its run.

use std::collections::HashMap;
use std::sync::Arc;

/// One job as the launcher knows it.
#[derive(Debug, Clone)]
struct Launched {
    /// Work left, in ms of run time.
    remaining_ms: i64,
    /// Bumped at every stop, so a finish or stop scheduled for an older run is ignored.
    run: u32,
    /// Start of the current run, while running.
    running_since: Option<i64>,
    /// Whether its work survives a preemption (up to the last checkpoint).
    resumable: bool,
}

/// The launcher's view of every job it was given.
#[derive(Debug, Default)]
pub struct SimLauncher {
    jobs: HashMap<Arc<str>, Launched>,
    checkpoint_interval_ms: i64,
}

impl SimLauncher {
    /// A launcher whose jobs checkpoint every `checkpoint_interval_ms` of run (0: never).
    pub fn new(checkpoint_interval_ms: i64) -> SimLauncher {
        SimLauncher {
            jobs: HashMap::new(),
            checkpoint_interval_ms,
        }
    }

    /// A job was accepted: it needs `duration_ms` of run.
    pub fn accepted(&mut self, job_id: Arc<str>, duration_ms: i64, resumable: bool) {
        self.jobs.insert(
            job_id,
            Launched {
                remaining_ms: duration_ms.max(1),
                run: 0,
                running_since: None,
                resumable,
            },
        );
    }

    /// Starts a placed job at `now`; returns when it will finish and its run number, or `None`
    /// for a job it does not know or that is already running.
    pub fn start(&mut self, job_id: &str, now: i64) -> Option<(i64, u32)> {
        let job = self.jobs.get_mut(job_id)?;
        if job.running_since.is_some() {
            return None;
        }
        job.running_since = Some(now);
        Some((now.saturating_add(job.remaining_ms), job.run))
    }

    /// Whether `run` is the job's current run and it is still running.
    pub fn is_running(&self, job_id: &str, run: u32) -> bool {
        self.jobs
            .get(job_id)
            .is_some_and(|j| j.run == run && j.running_since.is_some())
    }

    /// The current run number of a running job.
    pub fn running_run(&self, job_id: &str) -> Option<u32> {
        self.jobs
            .get(job_id)
            .filter(|j| j.running_since.is_some())
            .map(|j| j.run)
    }

    /// The job was stopped at `now` by a preemption: it keeps the work up to its last
    /// checkpoint if resumable.
    pub fn stopped(&mut self, job_id: &str, now: i64) {
        let interval = self.checkpoint_interval_ms;
        if let Some(job) = self.jobs.get_mut(job_id)
            && let Some(since) = job.running_since.take()
        {
            let ran = now.saturating_sub(since).max(0);
            let kept = if job.resumable && interval > 0 {
                ran - ran % interval
            } else {
                0
            };
            job.remaining_ms = (job.remaining_ms - kept).max(1);
            job.run += 1;
        }
    }

    /// The job ended for good.
    pub fn ended(&mut self, job_id: &str) {
        self.jobs.remove(job_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    #[test]
    fn resumable_jobs_keep_work_up_to_the_last_checkpoint() {
        let mut l = SimLauncher::new(30 * MIN);
        l.accepted("a".into(), 100 * MIN, true);
        l.accepted("b".into(), 100 * MIN, false);
        assert_eq!(l.start("a", 0), Some((100 * MIN, 0)));
        assert_eq!(l.start("a", 5), None, "already running");
        l.start("b", 0);
        l.stopped("a", 70 * MIN);
        l.stopped("b", 70 * MIN);
        assert!(!l.is_running("a", 0));
        // 60 of the 70 minutes were checkpointed: 40 minutes left.
        assert_eq!(l.start("a", 80 * MIN), Some((120 * MIN, 1)));
        // Not resumable: everything again.
        assert_eq!(l.start("b", 80 * MIN), Some((180 * MIN, 1)));
        assert!(l.is_running("a", 1));
        l.ended("a");
        assert!(!l.is_running("a", 1));
    }
}
