//! The scheduling pass all three baselines share: walk waiting jobs in the policy's order,
//! start every one that fits, and hold nodes back for the first one that does not (EASY
//! backfill, as Slurm's backfill scheduler does for its top job).
//!
//! Place in the flow: a policy's `pass` calls [`walk`] with its queues ("lanes") and a rank per
//! lane; [`walk`] merges the lanes by (allocated work first, lane rank, job key) and places
//! what fits on the nodes. Unallocated work (minimum runtime 0) is offered after every
//! allocated job of the pass, as a site would run it in a scavenger class.
//!
//! Reservation: the first allocated job of the order that the policy admits but the nodes do
//! not hold gets one ([`Cluster::reservation`]): the nodes it will take, and when. For the rest
//! of the pass a job may start only if it ends by then, or if it leaves the reserved job what
//! it will need: the GPUs it takes on the reserved nodes then (a job may use what the reserved
//! job leaves spare on its node), and, under static quotas, room in its allocation's quota
//! ([`Limit::admits_beside`]). So a large job waits at most until running jobs end, not behind
//! a stream of small ones; and small jobs still fill the holes they can leave in time. A job
//! that cannot ever fit (cordons) gets none, and the next one that does not fit is tried. Only
//! one job holds a reservation per pass (EASY).
//!
//! Cost: each (lane, shape) line is looked at from its head. A head that does not fit the
//! nodes, or that its policy's [`Limit`] refuses, drops its line for the rest of the pass,
//! which is sound because both free GPUs and limits only shrink while a pass places jobs (and
//! the reservation, once made, stays). A head that could start only by taking what the
//! reservation holds, and runs past it, hands its place to the next job of its line that ends
//! in time, looked for among the next `BACKFILL_DEPTH`. So a pass costs O((lines + jobs
//! placed) x (log lines + depth)) plus a walk over the running jobs' ends for each shape that
//! does not fit until one gets the reservation, however long the queues are.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::cluster::{Cluster, Reservation};
use super::place::Held;
use super::policy::Job;
use super::queue::{JobKey, Queue, ShapeKey};
use fairshare_model::shape::Shape;

/// How far down its line a pass looks for a job short enough to start before a reservation,
/// once the line's head cannot (Slurm bounds its backfill's look-ahead the same way, with
/// `bf_max_job_test`).
const BACKFILL_DEPTH: usize = 64;

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
    /// Whether `job`, which would run past the reservation for `reserved`, may start now and
    /// still leave `reserved` room under the limit when its reservation comes.
    fn admits_beside(&self, job: &Job, _reserved: &Job) -> bool {
        self.admits(job)
    }
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

/// A line's next candidate as the pass orders them: (unallocated, lane rank, job key, lane,
/// line).
type Head<R> = (bool, R, JobKey, usize, ShapeKey);

/// Places waiting jobs of `lanes` in order of (unallocated, lane rank, priority, ticket), lowest
/// first (allocated work before unallocated), skipping what does not fit and backfilling
/// around the first allocated job that does not (see the module doc); `rank` has one entry per
/// lane. Placed jobs leave their queue, are recorded as running in `cluster`, and are appended
/// to `started`.
pub(crate) fn walk<R: Ord + Copy>(
    lanes: &mut [Queue],
    rank: &[R],
    jobs: &[Job],
    cluster: &mut Cluster,
    limit: &mut impl Limit,
    started: &mut Vec<Start>,
) {
    let now = cluster.now_ms;
    let mut heads: BinaryHeap<Reverse<Head<R>>> = BinaryHeap::new();
    for ((lane, queue), &r) in lanes.iter().enumerate().zip(rank) {
        for (shape, key) in queue.heads() {
            if limit.admits(&jobs[key.1]) {
                heads.push(Reverse((shape.0, r, key, lane, shape)));
            }
        }
    }
    // The reservation, and the ticket of the job it is for.
    let mut reserved: Option<(Reservation, usize)> = None;
    // Shapes no running job's end makes room for (cordons): asked once per pass.
    let mut impossible: Vec<Shape> = Vec::new();
    while cluster.nodes.free_gpus() > 0 {
        let Some(Reverse((unallocated, r, key, lane, shape))) = heads.pop() else {
            break;
        };
        let job = &jobs[key.1];
        if !limit.admits(job) {
            continue;
        }
        // A job that runs past the reservation must leave the reserved job what it will need:
        // the GPUs on its nodes, and what the policy's limit holds for it.
        let past = reserved
            .as_ref()
            .filter(|(res, _)| !res.ends_before(now, job.duration_ms));
        let held = match past {
            None => cluster.nodes.place(job.shape),
            Some((res, ticket)) if limit.admits_beside(job, &jobs[*ticket]) => {
                let avoid = res.short_of(job.shape.gpus_per_node);
                cluster.nodes.place_avoiding(job.shape, &avoid)
            }
            Some(_) => None,
        };
        let runs_past = past.is_some();
        let queue = &mut lanes[lane];
        let Some(held) = held else {
            if !cluster.nodes.fits(job.shape) {
                if reserved.is_none() && !unallocated && !impossible.contains(&job.shape) {
                    match cluster.reservation(job.shape) {
                        Some(res) => reserved = Some((res, key.1)),
                        None => impossible.push(job.shape),
                    }
                }
                continue;
            }
            // It fits only by taking what the reservation holds, and runs past it: a job of
            // its line that ends in time may go instead.
            let Some((res, _)) = &reserved else {
                continue;
            };
            let short = queue
                .after(shape, key)
                .take(BACKFILL_DEPTH)
                .find(|k| res.ends_before(now, jobs[k.1].duration_ms));
            if let Some(next) = short {
                heads.push(Reverse((unallocated, r, next, lane, shape)));
            }
            continue;
        };
        if runs_past && let Some((res, _)) = &mut reserved {
            res.took(&held);
        }
        limit.took(job);
        queue.remove(shape, key);
        cluster
            .running
            .start(key.1, now.saturating_add(job.duration_ms), held.clone());
        started.push(Start {
            ticket: key.1,
            held,
        });
        if let Some(next) = queue.after(shape, key).next() {
            heads.push(Reverse((unallocated, r, next, lane, shape)));
        }
    }
}
