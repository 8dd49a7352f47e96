//! The greedy scheduling pass all three baselines share: walk waiting jobs in the policy's
//! order and start every one that fits.
//!
//! Place in the flow: a policy's `pass` calls [`walk`] with its queues ("lanes") and a rank per
//! lane; [`walk`] merges the lanes by (allocated work first, lane rank, job key) and places
//! what fits on the nodes. Unallocated work (minimum runtime 0) is offered after every
//! allocated job of the pass, as a site would run it in a scavenger class.
//! A job that does not fit does not block the ones after it (first-fit backfill without
//! reservations): that is how these baselines behave, and why large jobs can starve in them.
//!
//! Cost: only the head of each (lane, shape) line is ever looked at. A head that does not fit
//! the nodes, or that its policy's [`Limit`] refuses, drops its line for the rest of the pass,
//! which is sound because both free GPUs and limits only shrink while a pass places jobs. So a
//! pass costs O((lines + jobs placed) x log lines), however long the queues are.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::place::{Held, Nodes};
use super::policy::Job;
use super::queue::{JobKey, Queue, ShapeKey};

/// A job a pass started, and the GPUs it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Start {
    /// The job's ticket.
    pub ticket: usize,
    /// Where it runs.
    pub held: Vec<Held>,
}

/// A policy's limit on what may start beyond what fits the nodes (static quotas use one).
pub(crate) trait Limit {
    /// Whether `job` may start now.
    fn admits(&self, job: &Job) -> bool;
    /// `job` was started.
    fn took(&mut self, job: &Job);
}

/// No limit: whatever fits the nodes may start.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Unlimited;

impl Limit for Unlimited {
    fn admits(&self, _job: &Job) -> bool {
        true
    }
    fn took(&mut self, _job: &Job) {}
}

/// A line's head as the pass orders them: (unallocated, lane rank, job key, lane, line).
type Head<R> = (bool, R, JobKey, usize, ShapeKey);

/// Places waiting jobs of `lanes` in order of (unallocated, lane rank, priority, ticket), lowest
/// first (allocated work before unallocated),
/// skipping what does not fit; `rank` has one entry per lane. Placed jobs leave their queue and
/// are appended to `started`.
pub(crate) fn walk<R: Ord + Copy>(
    lanes: &mut [Queue],
    rank: &[R],
    jobs: &[Job],
    nodes: &mut Nodes,
    limit: &mut impl Limit,
    started: &mut Vec<Start>,
) {
    let mut heads: BinaryHeap<Reverse<Head<R>>> = BinaryHeap::new();
    for ((lane, queue), &r) in lanes.iter().enumerate().zip(rank) {
        for (shape, key) in queue.heads() {
            let job = &jobs[key.1];
            if nodes.fits(job.shape) && limit.admits(job) {
                heads.push(Reverse((shape.0, r, key, lane, shape)));
            }
        }
    }
    while nodes.free_gpus() > 0 {
        let Some(Reverse((_, r, key, lane, shape))) = heads.pop() else {
            break;
        };
        let job = &jobs[key.1];
        if !limit.admits(job) {
            continue;
        }
        let Some(held) = nodes.place(job.shape) else {
            continue;
        };
        limit.took(job);
        let queue = &mut lanes[lane];
        queue.pop(shape);
        started.push(Start {
            ticket: key.1,
            held,
        });
        if let Some(next) = queue.head(shape) {
            heads.push(Reverse((shape.0, r, next, lane, shape)));
        }
    }
}
