//! "FIFO with priorities": the scheduler fairshare replaced.
//!
//! Place in the flow: one of the [`super::Baseline`]s the replay runs. One queue for the whole
//! cluster, ordered by declared priority (higher first), then submit time, then workload index;
//! each pass starts every job that fits, in that order, backfilling around a reservation for
//! the first one that does not ([`super::pass`]). Budgets play no part, so a team that
//! marks everything high priority, or simply submits most, gets the cluster (priority
//! inflation). Minimum runtimes play no part, except that a job with minimum runtime 0 runs as
//! scavenger work: offered after every allocated job, and never reserved for.

use fairshare_model::budget::Fraction;

use super::cluster::Cluster;
use super::pass::{Start, Unlimited, walk};
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

    fn pass(&mut self, jobs: &[Job], cluster: &mut Cluster, started: &mut Vec<Start>) {
        walk(
            std::slice::from_mut(&mut self.queue),
            &[()],
            jobs,
            cluster,
            &mut Unlimited,
            started,
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::baseline::Baseline;
    use crate::baseline::tests::{H, M, job, node_action, nodes_of, run_checked, setup, starts};
    use crate::workload::Action;

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
    fn a_job_that_does_not_fit_holds_its_nodes_and_smaller_ones_start_around_it() {
        let s = setup(4, 8, &[("a", 1)]);
        let jobs = vec![
            job("half", 0, H, "a", 4, 0),     // n000 until 60 min
            job("full", 0, 3 * H, "a", 8, 0), // n001 until 3 h
            job("six", 0, 2 * H, "a", 6, 0),  // n002 until 2 h
            job("both-nodes", M, H, "a", 16, 9),
            job("long-small", 2 * M, H, "a", 2, 0),
            job("short", 3 * M, 30 * M, "a", 2, 0),
            job("long-too", 4 * M, H, "a", 2, 0),
            job("short-too", 5 * M, 20 * M, "a", 2, 0),
        ];
        let log = run_checked(Baseline::Fifo, &s, jobs, vec![]);
        let at = starts(&log);
        let on = |name: &str| nodes_of(&at, name);
        // The two whole nodes "both-nodes" needs are n003 (free) and n000, once "half" ends at
        // 60 min: they are held for it from 1 min.
        assert_eq!(
            (at["both-nodes"].0, on("both-nodes")),
            (H, vec!["n000", "n003"])
        );
        // A job that runs past 60 min starts only off the held nodes: n002 has two GPUs.
        assert_eq!(
            (at["long-small"].0, on("long-small")),
            (2 * M, vec!["n002"])
        );
        // One that ends by then may use them: best fit puts it beside "half".
        assert_eq!((at["short"].0, on("short")), (3 * M, vec!["n000"]));
        // Without the reservation it would have started at 4 min on n000 and kept "both-nodes"
        // waiting until 64 min; it waits for n002's first GPUs, when "long-small" ends.
        assert_eq!(
            (at["long-too"].0, on("long-too")),
            (2 * M + H, vec!["n002"])
        );
        // Behind it in the same line, a job that ends in time still starts at once.
        assert_eq!((at["short-too"].0, on("short-too")), (5 * M, vec!["n000"]));
    }

    #[test]
    fn a_job_running_past_a_reservation_may_use_what_the_reserved_job_leaves_of_its_node() {
        let s = setup(1, 8, &[("a", 1)]);
        let jobs = vec![
            job("four", 0, H, "a", 4, 0),
            // Reserved the node from 60 min; it leaves 2 of its 8 GPUs.
            job("six", M, H, "a", 6, 9),
            job("two-long", 2 * M, 3 * H, "a", 2, 0),
            job("one-long", 3 * M, 3 * H, "a", 1, 0),
        ];
        let log = run_checked(Baseline::Fifo, &s, jobs, vec![]);
        let at = starts(&log);
        assert_eq!(at["two-long"].0, 2 * M);
        assert_eq!(at["six"].0, H);
        // The spare GPUs are taken: the next long job waits although a GPU is free.
        assert_eq!(at["one-long"].0, 2 * H);
    }

    #[test]
    fn a_job_that_can_never_fit_holds_nothing_back_and_the_next_one_is_reserved_for() {
        let s = setup(3, 8, &[("a", 1)]);
        let cordon = node_action(
            0,
            Action::Cordon {
                node: "n002".into(),
            },
        );
        let jobs = vec![
            job("six", 0, H, "a", 6, 0),      // n000 until 60 min
            job("full", 0, 2 * H, "a", 8, 0), // n001 until 2 h
            job("three-nodes", M, H, "a", 24, 9),
            job("eight", M, H, "a", 8, 5),
            job("long", 2 * M, 2 * H, "a", 2, 0),
        ];
        let log = run_checked(Baseline::Fifo, &s, jobs, vec![cordon]);
        let at = starts(&log);
        // With n002 cordoned, no running job's end makes room for three nodes: nothing is held
        // for that job, and "eight" gets n000 when "six" ends.
        assert!(!at.contains_key("three-nodes"));
        assert_eq!(at["eight"].0, H);
        // So "long" may not take n000's two free GPUs meanwhile (it would run past 60 min).
        assert_eq!(at["long"].0, 2 * H);
    }
}
