//! Grace deadlines and requeues: how an ordered preemption ends.
//!
//! Place in the flow, for one victim:
//!
//! 1. This service appends `PreemptionOrdered { grace_deadline_ms = now + grace }`.
//! 2. The launcher stops the job and appends `JobPreempted { killed: false }` before the
//!    deadline: the job ends as preempted (its charge stops at that event).
//! 3. If no confirmation is folded by the deadline, [`expired`] yields
//!    `JobPreempted { killed: true }` from this service: the job counts as killed at the
//!    deadline and its GPUs are free for the decision service (which has counted them free
//!    from the deadline on anyway).
//! 4. Either way, a resumable job is then requeued: [`requeues`] yields `JobRequeued` for every
//!    resumable job the fold holds as preempted, and [`expired`] appends it right after the
//!    kill. The decision fold queues it again with its original submit time and priority, so it
//!    keeps its place in its allocation's queue. A job that is not resumable ends with its
//!    `JobPreempted`.

use fairshare_events::pb::{self, event::Body};

use super::state::PreemptionState;

/// `JobPreempted { killed: true }` (and `JobRequeued` after it for resumable jobs) for every
/// ordered job whose grace deadline is at or before `now_ms` and that still holds GPUs, in job
/// id order.
pub fn expired(state: &PreemptionState, now_ms: i64) -> Vec<Body> {
    let mut out = Vec::new();
    for (job_id, order) in state.orders() {
        let Some((job, placed)) = state.placed(job_id) else {
            continue;
        };
        let deadline = placed
            .preempt_deadline_ms
            .unwrap_or(order.grace_deadline_ms);
        if deadline > now_ms {
            continue;
        }
        out.push(Body::JobPreempted(pb::JobPreempted {
            job_id: job_id.clone(),
            killed: true,
        }));
        if job.resumable {
            out.push(Body::JobRequeued(pb::JobRequeued {
                job_id: job_id.clone(),
            }));
        }
    }
    out
}

/// `JobRequeued` for every resumable job preempted and not yet requeued, in job id order (the
/// launcher-confirmed ones: jobs killed by [`expired`] are requeued in the same batch).
pub fn requeues(state: &PreemptionState) -> Vec<Body> {
    state
        .awaiting_requeue()
        .iter()
        .map(|job_id| {
            Body::JobRequeued(pb::JobRequeued {
                job_id: job_id.clone(),
            })
        })
        .collect()
}

/// The earliest outstanding grace deadline after `now_ms`, for the shell's timer.
pub fn next_deadline(state: &PreemptionState, now_ms: i64) -> Option<i64> {
    state
        .orders()
        .keys()
        .filter_map(|id| state.placed(id))
        .filter_map(|(_, p)| p.preempt_deadline_ms)
        .filter(|&d| d > now_ms)
        .min()
}
