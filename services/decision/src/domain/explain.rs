//! Why a job waits: the pure answer behind `fairshare.api.explain.<cluster>`.
//!
//! The answer re-runs the pure `decide` on the service's current state at the current time (about
//! half a millisecond at 10,000 queued jobs), so it is exactly what the next cycle would say,
//! and costs nothing when nobody asks.

use fairshare_events::pb;

use super::debug;
use super::decide::{WaitReason, decide};
use super::rank::{self, FairTree};
use super::state::{DecisionState, JobStatus};
use fairshare_model::budget::BudgetTree;
use fairshare_model::words::Gpus;

fn rejection(code: pb::RejectionCode, message: String) -> pb::Rejection {
    pb::Rejection {
        code: code as i32,
        message,
    }
}

/// Explains job `job_id` against `state` at `now_ms`.
pub fn explain(
    state: &DecisionState,
    job_id: &str,
    now_ms: i64,
) -> Result<pb::Explanation, pb::Rejection> {
    let Some(job) = state.job(job_id) else {
        return Err(rejection(
            pb::RejectionCode::UnknownJob,
            format!(
                "job {job_id:?} is not live on cluster {:?} (never submitted there, or already ended)",
                state.cluster()
            ),
        ));
    };
    let decision = decide(state, now_ms);
    let allocation: &str = &job.allocation;
    // Unallocated work is not moved by its allocation's rank (it takes what every waiting
    // allocated job leaves): it is given none, so no reader takes the rank for its place.
    // One ranking for the place and the floor note: both read the state at `now_ms`.
    let fair = state
        .budget_tree()
        .map(|tree| (tree, rank::ranking(state, tree, now_ms)));
    let rank = fair
        .as_ref()
        .map(|(tree, fair)| serving_order(tree, fair))
        .unwrap_or_default()
        .iter()
        .position(|a| *a == allocation)
        .filter(|_| !job.request.is_unallocated());
    let mut explanation = pb::Explanation {
        job_id: job_id.to_owned(),
        allocation: allocation.to_owned(),
        basis: Some(decision.basis(0)),
        allocation_rank: rank.map_or(0, |r| u32::try_from(r + 1).unwrap_or(u32::MAX)),
        allocations_ranked: u32::try_from(decision.ranking.len()).unwrap_or(u32::MAX),
        ..Default::default()
    };
    explanation.last_preemption = job.last_order.as_deref().map(|o| pb::PreemptionNote {
        ordered_at_ms: o.ordered_at_ms,
        for_job_id: o.for_job_id.to_string(),
        reason: o.reason.to_string(),
        grace_deadline_ms: o.grace_deadline_ms,
        cause: o.cause,
    });
    match &job.status {
        JobStatus::Placed(placed) => {
            explanation.status = if placed.started { "running" } else { "placed" }.into();
            if placed.preempt_deadline_ms.is_some()
                && let Some(order) = &job.last_order
            {
                explanation.reason_code = "ordered_off".into();
                explanation.reason = format!("ordered off: {}", order.reason);
            }
            explanation.nodes = node_gpus(&placed.nodes);
        }
        JobStatus::Preempted => {
            explanation.status = "preempted".into();
            explanation.reason_code = "awaiting_requeue".into();
            explanation.reason = awaiting_requeue(job);
        }
        JobStatus::Queued => {
            explanation.status = "queued".into();
            // The job the cycle's reservation is for, when this one waits behind it for room.
            let mut behind = None;
            let position = |id: &str| decision.waiting.iter().position(|w| w.job_id == id);
            if let Some(at) = position(job_id) {
                let w = &decision.waiting[at];
                explanation.reason_code = w.reason.code().into();
                explanation.reason = w.reason.to_string();
                if matches!(
                    w.reason,
                    WaitReason::TooLargeForFreeNodes { .. } | WaitReason::BelowOthersInRank { .. }
                ) {
                    // The cycle meets waiting jobs in rank order: a reservation held by one met
                    // later (this job could have none: cordons, no plan) is not ahead of it.
                    behind = decision
                        .reservation
                        .as_ref()
                        .filter(|r| position(r.job_id).is_some_and(|holder| holder < at));
                }
            } else if decision.placements.iter().any(|p| p.job_id == job_id) {
                explanation.reason_code = "placed_next_cycle".into();
                explanation.reason =
                    "GPUs are free for it: the next decision cycle starts it".into();
            }
            let parked = matches!(
                explanation.reason_code.as_str(),
                "unknown_allocation" | "no_budget_tree"
            );
            if explanation.reason.is_empty() || parked {
                // Parked whatever the job is: rank, floor and unallocated rules do not apply.
            } else if job.request.is_unallocated() {
                // Its allocation's floor and rank do not move it: it charges nothing and
                // counts toward no floor.
                explanation.reason.push_str(
                    "; it is unallocated work (minimum runtime 0): it gets only GPUs that every \
                     waiting allocated job leaves, whatever its allocation's rank, and may be \
                     ordered off at any time",
                );
            } else {
                // A debug job within its allocation's allowance is met before the rank walk,
                // by the cycle and by the preemption pass: its allocation's floor and window
                // rank are not what decides its turn.
                let within_allowance = fair.as_ref().is_some_and(|(tree, fair)| {
                    debug::waiters(state, tree, &fair.leaf_order())
                        .iter()
                        .any(|w| &*w.key.job_id == job_id)
                });
                if within_allowance {
                    explanation.reason.push_str(&format!(
                        "; as a debug job within its allocation's debug allowance ({}), it is \
                         met before all work in rank order, by the decision cycle and by the \
                         preemption service, which may order work past its minimum runtime off \
                         for it",
                        Gpus(u64::from(state.debug_allowance_gpus()))
                    ));
                } else if let Some(note) = fair
                    .as_ref()
                    .and_then(|(tree, fair)| floor_note(state, tree, fair, allocation))
                {
                    explanation.reason.push_str(&note);
                }
                if let Some(r) = behind.filter(|_| !within_allowance) {
                    // The preemption service walks the same line (`victims::fair_share`): it
                    // orders allocated work off for the first waiter that does not fit, and,
                    // while no allowed victim can help that one, for a job behind it (the
                    // next 8 that do not fit, at most 4 of one allocation) only off its
                    // reserved nodes, from victims that checkpointed lately (unallocated ones
                    // too for a job that fits one node and is no debug job), and allocated work
                    // only while the job's allocation is below its share floor; or by moving
                    // work into free GPUs elsewhere (packing). Debug jobs under their allowance
                    // are met before that walk.
                    // The walk's exemption from the checkpoint limit reads the job's size and
                    // minimum runtime alone (`Waiter::debug`); the allowance's pass reads the
                    // allocation's allowance too, so a debug-sized job may have one without the
                    // other (allowance 0, or smaller than the job). (The walk reads the minimum
                    // runtime as the preemption service caps it; a cap under 15 min, which this
                    // state does not know, would make more jobs debug-sized there.)
                    let debug_sized = debug::is_candidate(&job.request);
                    let with_allowance = state.budget_tree().is_some_and(|tree| {
                        tree.allocation(&job.allocation)
                            .is_some_and(|leaf| debug::has_allowance(tree, leaf))
                    });
                    let exception = if debug_sized
                        && with_allowance
                        && debug::is_debug(
                            job.request.shape.total_gpus(),
                            job.request.min_runtime_ms,
                            state.debug_allowance_gpus(),
                        ) {
                        "; as a debug job it may still have work past its minimum runtime \
                         ordered off for it before that, while its allocation's debug \
                         allowance has room, and the unallocated work off the reserved nodes \
                         may be ordered off for it however long ago that work last \
                         checkpointed"
                    } else if debug_sized {
                        "; as a debug job (no debug allowance covers it), the unallocated work \
                         off the reserved nodes may be ordered off for it however long ago that \
                         work last checkpointed"
                    } else {
                        ""
                    };
                    explanation.reason.push_str(&format!(
                        "; job {} of {} ranks ahead of it and holds the cycle's reservation: \
                         preemption makes room for waiting jobs one at a time in this order, so \
                         for this one only once that job fits or is being made room for (until \
                         then, and only for the next few jobs behind it, at most four of one \
                         allocation, only work off the reserved nodes may be ordered off for \
                         it: unallocated work (for a job that fits one node, only work that \
                         checkpointed lately), or, while its allocation holds fewer GPUs than \
                         its share floor, work the preemption rules allow that checkpointed \
                         lately; or work moved into free GPUs on other nodes to make room on \
                         one){exception}",
                        r.job_id, r.allocation
                    ));
                }
            }
            room_being_made(state, job_id, now_ms, &mut explanation);
        }
    }
    Ok(explanation)
}

/// Why a preempted job is not queued yet, as `explain` and the queue listing say it.
pub(crate) fn awaiting_requeue(job: &super::state::Job) -> String {
    match &job.last_order {
        Some(order) => format!("preempted ({}); waiting for its requeue", order.reason),
        None => "preempted; waiting for its requeue".into(),
    }
}

/// The allocations in the order a decision cycle serves them at `now_ms`: with the share
/// floor on, those below their floor first, then the rest, each group by window usage (the
/// order [`crate::domain::rank::FairTree::next_pending_leaf`] walks); without it, by window
/// usage alone.
pub(crate) fn serving_order(tree: &BudgetTree, fair: &FairTree<'_>) -> Vec<String> {
    let by_window = fair.leaf_order();
    let (below, rest): (Vec<_>, Vec<_>) = by_window
        .into_iter()
        .partition(|&leaf| fair.below_floor(leaf));
    below
        .into_iter()
        .chain(rest)
        .map(|leaf| tree.accounts[leaf].path.clone())
        .collect()
}

/// `(node, GPUs)` pairs as the wire lists them.
pub(crate) fn node_gpus(nodes: &[(std::sync::Arc<str>, u32)]) -> Vec<pb::NodeGpus> {
    nodes
        .iter()
        .map(|(node, gpus)| pb::NodeGpus {
            node: node.to_string(),
            gpus: *gpus,
        })
        .collect()
}

/// What preemptions made for a queued job so far: GPUs held for it by its promise
/// ([`crate::domain::promise`]) and the victims still stopping for it.
fn room_being_made(
    state: &DecisionState,
    job_id: &str,
    now_ms: i64,
    explanation: &mut pb::Explanation,
) {
    // A promise is made with the first order, before any victim has left: nothing held yet.
    if let Some(promise) = state
        .promise_for(job_id, now_ms)
        .filter(|p| !p.nodes.is_empty())
    {
        explanation.held_for_it = node_gpus(&promise.nodes);
        explanation.held_until_ms = promise.until_ms;
    }
    // A scan of the live jobs: explain is asked rarely, and the state keeps no index by the
    // job an order was for.
    explanation.victims_stopping = state
        .jobs
        .iter()
        .filter(|(_, j)| {
            matches!(&j.status, JobStatus::Placed(p) if p.preempt_deadline_ms.is_some())
                && j.last_order
                    .as_ref()
                    .is_some_and(|o| &*o.for_job_id == job_id)
        })
        .map(|(id, _)| id.to_string())
        .collect();
}

/// Where the job's allocation stands against its share floor ([`rank`]), as a clause to add
/// to the reason: whether it goes before the others or after those below their floors.
fn floor_note(
    state: &DecisionState,
    tree: &BudgetTree,
    fair: &FairTree<'_>,
    allocation: &str,
) -> Option<String> {
    let leaf = tree.allocation(allocation)?;
    let standing = fair.floor_standing(leaf)?;
    let fraction = tree.fraction(leaf);
    if fraction.num == 0 {
        // No claim: Fair Tree ranks it after every sibling with a share, whatever the window.
        return Some(format!(
            "; {allocation} has no share of the cluster (share 0): it ranks after every \
             allocation with one, and gets only GPUs they leave"
        ));
    }
    // For people: one decimal is enough (ranking compares exactly), but see `floor_text`.
    let floor = standing.floor_num as f64 / standing.floor_den as f64;
    let share = fraction.num as f64 / fraction.den as f64 * state.total_gpus() as f64;
    // Its work ordered off still runs until it stops, but no longer counts as held.
    let leaving: u64 = state.in_flight.get(allocation).map_or(0, |runs| {
        runs.iter()
            .filter(|(_, r)| r.stopping())
            .map(|(_, r)| r.gpus)
            .sum()
    });
    let leaving = if leaving > 0 {
        format!(
            " (not counting {} of its work ordered off and stopping)",
            Gpus(leaving)
        )
    } else {
        String::new()
    };
    let order = if standing.excess() < 0 {
        "it goes before every allocation at or above its own"
    } else {
        "allocations below theirs go first, then the window decides"
    };
    // The hourly floor moves it by whole GPUs: a difference under half a GPU is rounding.
    let moved = if floor > share + 0.5 {
        format!(
            " this hour (its share, {share:.1}, raised by the owed time it is behind this hour)"
        )
    } else if floor < share - 0.5 {
        format!(
            " this hour (its share, {share:.1}, lowered by the time it ran beyond its owed time \
             this hour, while others are behind)"
        )
    } else {
        String::new()
    };
    Some(format!(
        "; {allocation} holds {}{leaving} against a share floor of {}{moved}: {order}",
        Gpus(standing.held),
        floor_text(floor, standing.held, standing.excess())
    ))
}

/// `floor` with one decimal, or as many more (up to 4) as it takes not to read as `held` when
/// the exact comparison (`excess`, held minus floor) says they differ: "holds 8 against a share
/// floor of 8.0: it goes before every allocation" would contradict itself for a floor of 8.04.
fn floor_text(floor: f64, held: u64, excess: i128) -> String {
    let held_text = |d: usize| format!("{held}.{}", "0".repeat(d));
    let mut decimals = 1;
    while excess != 0 && decimals < 4 && format!("{floor:.decimals$}") == held_text(decimals) {
        decimals += 1;
    }
    format!("{floor:.decimals$}")
}
