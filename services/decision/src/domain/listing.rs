//! The cluster's live jobs, in the order the next cycle would meet them: the pure answer behind
//! `fairshare.api.queue.<cluster>` (`fairshare queue`).
//!
//! Like [`explain()`](super::explain()), the listing re-runs the pure `decide` on the service's
//! current state at the current time, so a waiting job's reason is the one the next cycle
//! would give, and nothing is kept between questions. Where `explain` answers for one job a
//! researcher already knows, the listing is how they find it, and how an operator sees what
//! waits behind what.

use std::collections::HashMap;

use fairshare_events::{codec, pb};

use super::decide::Waiting;
use super::decide::decide;
use super::explain::{awaiting_requeue, node_gpus, serving_order};
use super::rank;
use super::state::{DecisionState, Job, JobStatus, Placed};

/// The most jobs one reply lists: about 300 bytes each with its reason, well under NATS's
/// default 1 MiB payload limit.
pub const MAX_LISTED: usize = 2_000;

/// One job of the listing before it is written out.
enum Row<'d, 's> {
    /// Queued; the next cycle places it.
    Next(&'s str),
    /// Queued, and left waiting by the next cycle, for its reason.
    Waiting(&'d Waiting<'s>),
    /// Stopped by a preemption, waiting for its requeue.
    Preempted(&'s str, &'s Job),
    /// Placed or running.
    Placed(&'s str, &'s Job, &'s Placed),
}

/// Whether `allocation` is `filter` or lies under it (`research/vision` takes
/// `research/vision/video`, not `research/visionary`); an empty filter takes everything.
fn under(allocation: &str, filter: &str) -> bool {
    filter.is_empty()
        || allocation
            .strip_prefix(filter)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The live jobs of `state` at `now_ms` that `request` asks for (by account, by user):
/// queued jobs the next cycle
/// would place, then those it leaves waiting, in the order it meets them, then preempted jobs
/// waiting for their requeue, then placed and running jobs, longest running first. A filter
/// that names no account of the budget tree and no live job's allocation is refused, so a typo
/// is not read as an empty queue.
pub fn listing(
    state: &DecisionState,
    request: &pb::QueueRequest,
    now_ms: i64,
) -> Result<pb::QueueListing, pb::Rejection> {
    let filter = request.allocation.trim_end_matches('/');
    if filter.is_empty() && !request.allocation.is_empty() {
        // Only slashes: no account, and not the empty filter that asks for every job.
        return Err(pb::Rejection {
            code: pb::RejectionCode::UnknownAllocation as i32,
            message: format!(
                "allocation filter {:?} names no account: give a path such as \
                 research/vision, or none for every job",
                request.allocation
            ),
        });
    }
    // Whose jobs: everyone's, or exactly this user's (a user with no live job is an empty
    // listing, not an error: nobody can tell a typo from a user whose jobs all ended).
    let user = request.user.as_str();
    let theirs = |job: &Job| user.is_empty() || *job.user == *user;
    let known = filter.is_empty()
        || state
            .budget_tree()
            .is_some_and(|t| t.accounts.iter().any(|a| under(&a.path, filter)))
        || state.jobs.values().any(|j| under(&j.allocation, filter));
    if !known {
        return Err(pb::Rejection {
            code: pb::RejectionCode::UnknownAllocation as i32,
            message: format!(
                "no account {filter:?} in cluster {:?}'s budget tree, and no live job of an \
                 allocation under it",
                state.cluster()
            ),
        });
    }
    let limit = match usize::try_from(request.limit) {
        Ok(0) | Err(_) => MAX_LISTED,
        Ok(n) => n.min(MAX_LISTED),
    };
    let decision = decide(state, now_ms);

    // Every matching job in listing order, as references: a queue of 100,000 is walked once,
    // and only the jobs listed are looked up, ranked and given their sentences.
    let mut rows: Vec<Row<'_, '_>> = Vec::new();
    // A user's jobs are looked up to be told apart; everyone's need no lookup until listed.
    let user_of = |id: &str| state.job(id).is_some_and(&theirs);
    rows.extend(
        (decision.placements.iter())
            .filter(|p| under(p.allocation, filter) && (user.is_empty() || user_of(p.job_id)))
            .map(|p| Row::Next(p.job_id)),
    );
    rows.extend(
        (decision.waiting.iter())
            .filter(|w| under(w.allocation, filter) && (user.is_empty() || user_of(w.job_id)))
            .map(Row::Waiting),
    );
    let mut preempted = Vec::new();
    let mut placed = Vec::new();
    for (id, job) in &state.jobs {
        if !under(&job.allocation, filter) || !theirs(job) {
            continue;
        }
        match &job.status {
            JobStatus::Queued => {}
            JobStatus::Preempted => preempted.push((&**id, job)),
            JobStatus::Placed(p) => placed.push((&**id, job, p)),
        }
    }
    // Preempted jobs by when they were ordered off, earliest first (the order their requeues
    // are due in; one stopped with no order on record last); placed ones by how long they have
    // held their GPUs.
    preempted.sort_by_key(|(id, job)| {
        let ordered_at = job
            .last_order
            .as_ref()
            .map_or(i64::MAX, |o| o.ordered_at_ms);
        (ordered_at, *id)
    });
    placed.sort_by_key(|(id, _, p)| (p.start_ms, *id));
    rows.extend(
        preempted
            .into_iter()
            .map(|(id, job)| Row::Preempted(id, job)),
    );
    rows.extend(
        placed
            .into_iter()
            .map(|(id, job, p)| Row::Placed(id, job, p)),
    );
    let matched = u32::try_from(rows.len()).unwrap_or(u32::MAX);
    rows.truncate(limit);

    // The allocations' places in the serving order, looked up per listed job.
    let ranks: HashMap<String, u32> = state
        .budget_tree()
        .map(|tree| serving_order(tree, &rank::ranking(state, tree, now_ms)))
        .unwrap_or_default()
        .into_iter()
        .zip(1..)
        .collect();
    let entry = |id: &str, job: &Job| pb::QueueEntry {
        job_id: id.to_owned(),
        allocation: job.allocation.to_string(),
        user: job.user.to_string(),
        gpus: job.request.shape.total_gpus(),
        submitted_at_ms: job.submitted_ms,
        allocation_rank: if job.request.is_unallocated() {
            0
        } else {
            ranks.get(&*job.allocation).copied().unwrap_or(0)
        },
        unallocated: job.request.is_unallocated(),
        ..Default::default()
    };
    let jobs = rows
        .into_iter()
        .filter_map(|row| match row {
            Row::Next(id) => state.job_entry(id).map(|(id, job)| pb::QueueEntry {
                status: "queued".into(),
                reason_code: "placed_next_cycle".into(),
                reason: "GPUs are free for it: the next decision cycle starts it".into(),
                ..entry(id, job)
            }),
            Row::Waiting(w) => state.job_entry(w.job_id).map(|(id, job)| pb::QueueEntry {
                status: "queued".into(),
                reason_code: w.reason.code().into(),
                reason: w.reason.to_string(),
                ..entry(id, job)
            }),
            Row::Preempted(id, job) => Some(pb::QueueEntry {
                status: "preempted".into(),
                reason_code: "awaiting_requeue".into(),
                reason: awaiting_requeue(job),
                ..entry(id, job)
            }),
            Row::Placed(id, job, p) => {
                let ordered = job
                    .last_order
                    .as_ref()
                    .filter(|_| p.preempt_deadline_ms.is_some());
                Some(pb::QueueEntry {
                    status: if p.started { "running" } else { "placed" }.into(),
                    since_ms: p.start_ms,
                    reason_code: if ordered.is_some() { "ordered_off" } else { "" }.into(),
                    reason: ordered
                        .map_or_else(String::new, |o| format!("ordered off: {}", o.reason)),
                    nodes: node_gpus(&p.nodes),
                    ..entry(id, job)
                })
            }
        })
        .collect();
    Ok(pb::QueueListing {
        basis: Some(decision.basis(0)),
        jobs,
        matched,
    })
}

/// Drops jobs from the end of `reply`'s listing until the encoded reply takes at most
/// `max_bytes` (a server configured with a payload limit below the default would otherwise
/// refuse the reply, and the asker would see only a timeout); returns how many went.
/// `matched` still counts them, so the asker sees the list was cut.
pub fn fit_reply(reply: &mut pb::QueueReply, max_bytes: usize) -> usize {
    let Some(excess) = codec::encoded_len(&*reply).checked_sub(max_bytes) else {
        return 0;
    };
    let Some(pb::queue_reply::Result::Listing(listing)) = reply.result.as_mut() else {
        return 0;
    };
    // Each job takes its bytes, their length and a one-byte field key (`jobs` is field 2), so
    // dropping jobs from the end until their bytes make up the excess is enough; it may drop
    // a job or two too many, since the lengths of the listing and of the reply around it
    // shrink too. Those are put back while the reply still fits (each check measures the
    // listing once, and the lengths shrink by a few bytes at most).
    let mut freed = 0;
    let mut keep = listing.jobs.len();
    while freed < excess && keep > 0 {
        keep -= 1;
        freed += 1 + codec::delimited_len(&listing.jobs[keep]);
    }
    let mut dropped = listing.jobs.split_off(keep);
    dropped.reverse();
    // The reply is the listing as field 1: a one-byte key, its length, its bytes.
    let reply_len = |listing: &pb::QueueListing| 1 + codec::delimited_len(listing);
    while let Some(job) = dropped.pop() {
        listing.jobs.push(job);
        if reply_len(listing) > max_bytes {
            dropped.extend(listing.jobs.pop());
            break;
        }
    }
    dropped.len()
}
