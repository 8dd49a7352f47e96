//! "FIFO with priorities": the scheduler fairshare replaced.
//!
//! Place in the flow: one of the [`super::Baseline`]s the replay runs. One queue for the whole
//! cluster, ordered by declared priority (higher first), then submit time, then workload index;
//! each pass starts every job that fits, in that order (a job that does not fit does not block
//! the ones after it: first-fit backfill, no reservations). Budgets play no part, so a team that
//! marks everything high priority, or simply submits most, gets the cluster (priority
//! inflation). Minimum runtimes play no part either: a job with minimum runtime 0 is just
//! another job.

use fairshare_model::budget::Fraction;

use super::pass::{Start, Unlimited, walk};
use super::place::Nodes;
use super::policy::{Job, Policy};
use super::queue::Queue;

/// FIFO with priorities.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fifo {
    queue: Queue,
}

impl Policy for Fifo {
    fn set_shares(&mut self, _fractions: &[Fraction]) {}

    fn enqueue(&mut self, ticket: usize, job: &Job) {
        self.queue
            .push(job.shape, job.unallocated, job.priority, ticket);
    }

    fn finished(&mut self, _job: &Job) {}

    fn pass(&mut self, jobs: &[Job], nodes: &mut Nodes, started: &mut Vec<Start>) {
        walk(
            std::slice::from_mut(&mut self.queue),
            &[()],
            jobs,
            nodes,
            &mut Unlimited,
            started,
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::baseline::Baseline;
    use crate::baseline::tests::{H, M, job, run_checked, setup, starts};

    #[test]
    fn a_later_high_priority_job_starts_before_an_earlier_low_priority_one() {
        let s = setup(2, 8, &[("a", 1), ("b", 1)]);
        let jobs = vec![
            job("short", 0, 10 * M, "a", 8, 0),
            job("long", 0, 60 * M, "a", 8, 0),
            job("low", M, 30 * M, "b", 8, 0),
            job("high", 2 * M, 100 * M, "a", 8, 5),
        ];
        let log = run_checked(Baseline::Fifo, &s, jobs, vec![]);
        let at = starts(&log);
        assert_eq!(at["short"].0, 0);
        assert_eq!(at["long"].0, 0);
        // "short" frees a node at 10 min: the high-priority job takes it although "low" waited
        // longer; "low" gets the node "long" frees at 60 min.
        assert_eq!(at["high"].0, 10 * M);
        assert_eq!(at["low"].0, 60 * M);
    }

    #[test]
    fn a_job_that_does_not_fit_does_not_block_smaller_ones_behind_it() {
        let s = setup(2, 8, &[("a", 1)]);
        let jobs = vec![
            job("half", 0, H, "a", 4, 0),
            job("both-nodes", M, H, "a", 16, 9),
            job("small", 2 * M, H, "a", 2, 0),
        ];
        let log = run_checked(Baseline::Fifo, &s, jobs, vec![]);
        let at = starts(&log);
        assert_eq!(at["small"].0, 2 * M);
        // Backfill has its price: "small" landed on the half-used node, which now frees only
        // when "small" ends.
        assert_eq!(at["both-nodes"].0, 2 * M + H);
    }
}
