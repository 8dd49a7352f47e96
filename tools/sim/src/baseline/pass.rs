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
//! of the pass a job may start only if it ends by then, or on other nodes. So a large job waits
//! at most until running jobs end, not behind a stream of small ones; and small jobs still fill
//! the holes they can leave in time. A job that cannot ever fit (cordons) gets none, and the
//! next one that does not fit is tried. Only one job holds a reservation per pass (EASY), and
//! only GPUs on the reserved nodes are held back, never the rest of a node it leaves free.
//!
//! Cost: each (lane, shape) line is looked at from its head. A head that does not fit the
//! nodes, or that its policy's [`Limit`] refuses, drops its line for the rest of the pass,
//! which is sound because both free GPUs and limits only shrink while a pass places jobs (and
//! the reservation, once made, stays). A head that fits only on reserved nodes and runs past
//! the reservation hands its place to the next job of its line that ends in time, looked for
//! among the next `BACKFILL_DEPTH`. So a pass costs O((lines + jobs placed) x (log lines +
//! depth)) plus one walk over the running jobs' ends, however long the queues are.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::cluster::{Cluster, Reservation};
use super::place::Held;
use super::policy::Job;
use super::queue::{JobKey, Queue, ShapeKey};

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
    let mut reservation: Option<Reservation> = None;
    while cluster.nodes.free_gpus() > 0 {
        let Some(Reverse((unallocated, r, key, lane, shape))) = heads.pop() else {
            break;
        };
        let job = &jobs[key.1];
        if !limit.admits(job) {
            continue;
        }
        let held = match &reservation {
            Some(res) if !res.ends_before(now, job.duration_ms) => {
                cluster.nodes.place_avoiding(job.shape, &res.nodes)
            }
            _ => cluster.nodes.place(job.shape),
        };
        let queue = &mut lanes[lane];
        let Some(held) = held else {
            if !cluster.nodes.fits(job.shape) {
                if reservation.is_none() && !unallocated {
                    reservation = cluster.reservation(job.shape);
                }
                continue;
            }
            // It fits only where the reservation holds GPUs, and runs past it: a job of its
            // line that ends in time may go there instead.
            let Some(res) = &reservation else {
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
