//! One preemption pass: `decide_preemptions(state, now, config) -> event bodies`.
//!
//! Place in the flow: the shell folds the cluster's log into a [`PreemptionState`], calls
//! [`decide_preemptions`] after each batch of events and at the times [`next_due`] names, and
//! appends the bodies it returns (each with `at_ms = now`, see [`into_events`]) to the job's or
//! node's subject. Then it folds its own events like any other, and calls again. Pure: the same
//! state, time and config give the same bodies in the same order, which is what lets an audit
//! re-derive every order from the log prefix named by its basis.
//!
//! A pass, in this order (the order of the bodies returned):
//!
//! 1. `JobRequeued` for resumable jobs the launcher confirmed preempted ([`grace::requeues`]).
//! 2. `JobPreempted { killed: true }` (+ `JobRequeued` if resumable) for orders past their
//!    grace deadline ([`grace::expired`]).
//! 3. `PreemptionOrdered` for jobs on nodes leaving service ([`drain::drain_victims`]), then
//!    `NodeDrained` for cordoned nodes now empty ([`drain::drained`]).
//! 4. Only if steps 1 to 3 requeued, ordered or killed nothing: `PreemptionOrdered` for the
//!    victims of the first waiting allocated job that does not fit, or, if it cannot be helped,
//!    victims off its reserved nodes for one of the jobs behind it (unallocated work, or what
//!    the rules allow while that job's allocation is below its share floor)
//!    ([`victims::fair_share`]). Fair share
//!    waits for the next pass when something else changed because its view of the queue and
//!    of soon-free GPUs would be stale until those events are folded (it could otherwise pick
//!    a job ordered off in the same pass, or pass over a requeued job that ranks first). When that first job is blocked (no rule lets it take anyone's
//!    work), `PreemptionOrdered` for the jobs a packing move shifts to free GPUs elsewhere so
//!    it fits on one node ([`pack::moves`]).
//!
//! Every `PreemptionOrdered` carries its rule as a `cause` (unallocated, window, share floor,
//! debug allowance, packing, maintenance) beside the `reason` in words, `grace_deadline_ms =
//! now + grace`, and a [`pb::DecisionBasis`] naming the last sequence folded, `now` and the
//! usage window the state takes snapshots of; `cycle`
//! is 0 here and the shell stamps its own cycle number with [`stamp_cycle`].

use fairshare_events::pb::{self, event::Body};
use fairshare_model::hour::{HOUR_MS, hour_start};
use fairshare_model::words::Gpus;

use super::config::Config;
use super::contract;
use super::drain;
use super::grace;
use super::pack::{self, PackPlan};
use super::state::PreemptionState;
use super::victims::{self, FairShare, Grounds, VictimPlan};

/// Why one job goes: the job it makes room for (empty for a drain), the rule as a
/// [`pb::PreemptionCause`] and in words.
struct Grounded<'s> {
    victim: &'s str,
    for_job: &'s str,
    cause: pb::PreemptionCause,
    reason: String,
}

fn order(grounded: Grounded<'_>, basis: pb::DecisionBasis, deadline: i64) -> Body {
    let mut ordered = pb::PreemptionOrdered {
        job_id: grounded.victim.to_owned(),
        grace_deadline_ms: deadline,
        reason: grounded.reason,
        for_job_id: grounded.for_job.to_owned(),
        basis: Some(basis),
        cause: 0,
    };
    ordered.set_cause(grounded.cause);
    Body::PreemptionOrdered(ordered)
}

/// Whether `victim` went for a debug waiter below its floor by the window alone (its
/// allocation held its floor): the plan's floor grounds do not describe it.
fn debug_by_window(plan: &VictimPlan<'_>, victim: &victims::Victim<'_>) -> bool {
    victim.debug_by_window && plan.grounds == Grounds::BelowFloor
}

/// The rule that lets `victim` go for the plan's waiter, as [`fair_share_reason`] words it.
fn fair_share_cause(plan: &VictimPlan<'_>, victim: &victims::Victim<'_>) -> pb::PreemptionCause {
    if victim.unallocated {
        pb::PreemptionCause::Unallocated
    } else if victim.allocation == plan.waiter.allocation {
        pb::PreemptionCause::DebugAllowance
    } else if debug_by_window(plan, victim) {
        pb::PreemptionCause::Window
    } else {
        match plan.grounds {
            Grounds::Window => pb::PreemptionCause::Window,
            Grounds::BelowFloor => pb::PreemptionCause::ShareFloor,
            Grounds::DebugAllowance => pb::PreemptionCause::DebugAllowance,
        }
    }
}

fn fair_share_reason(plan: &VictimPlan<'_>, victim: &victims::Victim<'_>) -> String {
    let w = &plan.waiter;
    let kind = if w.debug { "debug job" } else { "job" };
    let why = if victim.unallocated {
        "the victim is unallocated work".to_owned()
    } else if victim.allocation == w.allocation {
        // Only a debug job under its allocation's allowance takes its own allocation's work.
        format!(
            "the victim is {}'s own work past its minimum runtime, given up for its debug allowance",
            w.allocation
        )
    } else if debug_by_window(plan, victim) {
        // The floor's comparison does not hold for this victim: the window took it.
        format!(
            "allocation {} ranks below {} after charging the waiter {} x {} s, and held \
             at least its share floor, so a debug job may take a whole job of it",
            victim.allocation,
            w.allocation,
            Gpus(w.shape.total_gpus()),
            w.min_runtime_ms / 1000
        )
    } else {
        match plan.grounds {
            Grounds::Window => format!(
                "allocation {} ranks below {} after charging the waiter {} x {} s",
                victim.allocation,
                w.allocation,
                Gpus(w.shape.total_gpus()),
                w.min_runtime_ms / 1000
            ),
            Grounds::BelowFloor => format!(
                "allocation {} holds fewer GPUs than its share floor, and {} is left no \
                 further below its own floor than {} is",
                w.allocation, victim.allocation, w.allocation
            ),
            Grounds::DebugAllowance => format!(
                "the share floor allows it: allocation {} is left no further below its floor \
                 than {} is, or was at or above it and ranks below {} by the window",
                victim.allocation, w.allocation, w.allocation
            ),
        }
    };
    format!(
        "fair share: makes room for {kind} {} of {} on {}; {why}; lost work {} GPU-s",
        w.job_id,
        w.allocation,
        plan.nodes.join(","),
        victim.lost_gpu_ms / 1000
    )
}

fn pack_reason(plan: &PackPlan<'_>, mover: &victims::Victim<'_>) -> String {
    let w = &plan.waiter;
    let kind = if mover.unallocated {
        "unallocated work"
    } else {
        "past its minimum runtime"
    };
    let place = match plan.behind {
        None => "first in line and blocked".to_owned(),
        Some(blocked) => format!("behind blocked job {blocked}, off the nodes reserved for it"),
    };
    format!(
        "packing: moves {} ({kind}) to free GPUs on another node so that job {} of {}, {place}, \
         fits on {}; lost work {} GPU-s",
        mover.job_id,
        w.job_id,
        w.allocation,
        plan.node,
        mover.lost_gpu_ms / 1000
    )
}

/// Everything the preemption service should append now (see the module doc for the order).
pub fn decide_preemptions(state: &PreemptionState, now_ms: i64, config: &Config) -> Vec<Body> {
    decide_preemptions_and_retry(state, now_ms, config).0
}

/// [`decide_preemptions`], and when a pass that orders nothing is worth running again with no
/// new event: the earliest next checkpoint of a victim or plan the fair-share walk held back
/// for its lost work (after it, that victim throws away less). [`next_due`] leaves those out,
/// since it would have to search for them; the service and the simulator pass at this time
/// too, so the held-back order goes at its victims' checkpoint, not at the next timer.
pub fn decide_preemptions_and_retry(
    state: &PreemptionState,
    now_ms: i64,
    config: &Config,
) -> (Vec<Body>, Option<i64>) {
    let basis = pb::DecisionBasis {
        through_sequence: state.last_applied(),
        computed_at_ms: now_ms,
        cycle: 0,
        usage_window_ms: state.decision().usage_window_ms().unwrap_or(0),
    };
    let deadline = now_ms.saturating_add(config.grace_ms.max(0));
    let mut out = grace::requeues(state);
    let kills = grace::expired(state, now_ms);
    // A requeue changes the queue the fair-share walk reads as much as a kill frees GPUs.
    let mut changed = !out.is_empty() || !kills.is_empty();
    out.extend(kills);
    for (job_id, reason) in drain::drain_victims(state, now_ms, config) {
        // Off the node by the window's start, even when the order waited for the job's
        // protection to end (a grace longer than the decision service's lead): the grace is
        // cut to what is left, never the protection.
        let deadline = match reason {
            drain::DrainReason::Maintenance { start_ms, .. }
            | drain::DrainReason::NotStartedInTime { start_ms, .. }
                if now_ms < start_ms =>
            {
                deadline.min(start_ms)
            }
            _ => deadline,
        };
        let grounded = Grounded {
            victim: &job_id,
            for_job: "",
            cause: pb::PreemptionCause::Maintenance,
            reason: reason.to_string(),
        };
        out.push(order(grounded, basis, deadline));
        changed = true;
    }
    out.extend(drain::drained(state));
    if changed {
        return (out, None);
    }
    let (fair_share, view) = victims::fair_share_and_view(state, now_ms, config);
    let retry = view
        .as_ref()
        .and_then(|v| v.retry_at())
        .filter(|&at| at > now_ms);
    let orders: Vec<Grounded<'_>> = match fair_share {
        FairShare::Preempt(plan) => plan
            .victims
            .iter()
            .map(|v| Grounded {
                victim: v.job_id,
                for_job: plan.waiter.job_id,
                cause: fair_share_cause(&plan, v),
                reason: fair_share_reason(&plan, v),
            })
            .collect(),
        FairShare::Blocked(line) => pack::moves_in(state, &line, view, now_ms, config)
            .map(|plan| {
                plan.movers
                    .iter()
                    .map(|v| Grounded {
                        victim: v.job_id,
                        for_job: plan.waiter.job_id,
                        cause: pb::PreemptionCause::Packing,
                        reason: pack_reason(&plan, v),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        FairShare::NothingToDo => Vec::new(),
    };
    let retry = retry.filter(|_| orders.is_empty());
    for grounded in orders {
        out.push(order(grounded, basis, deadline));
    }
    (out, retry)
}

/// Sets the basis cycle number of every `PreemptionOrdered` in `bodies`.
pub fn stamp_cycle(bodies: &mut [Body], cycle: u64) {
    for b in bodies {
        if let Body::PreemptionOrdered(p) = b
            && let Some(basis) = &mut p.basis
        {
            basis.cycle = cycle;
        }
    }
}

/// The bodies as log events taking effect at `now_ms`.
pub fn into_events(bodies: Vec<Body>, now_ms: i64) -> Vec<pb::Event> {
    bodies
        .into_iter()
        .map(|b| pb::Event {
            at_ms: now_ms,
            body: Some(b),
        })
        .collect()
}

/// The next time after `now_ms` at which [`decide_preemptions`] (or the decision cycle) could
/// return something with no new event folded: a grace deadline, a drain or window becoming
/// due, a promise holding GPUs lapsing (they are anyone's then), or, while allocated work
/// waits, the end of some running job's minimum runtime (it may become a victim) and, with the
/// hourly floor, the next clock hour (floors go back to the shares). Not a
/// victim's next checkpoint, after which an order held back for lost work may go: listing
/// every running job's checkpoints would wake the service every few seconds on a busy
/// cluster, so the pass that held the order back names the one that matters
/// ([`decide_preemptions_and_retry`]). Nor the hourly floors' moves within an hour: the next
/// event, or the service's periodic pass (every 5 s by default), meets those.
pub fn next_due(state: &PreemptionState, now_ms: i64, config: &Config) -> Option<i64> {
    let d = state.decision();
    let mut next = [
        grace::next_deadline(state, now_ms),
        drain::next_drain_due(state, now_ms, config),
        d.next_promise_lapse(now_ms),
    ]
    .into_iter()
    .flatten()
    .min();
    let waiting = d.queues().values().any(|q| !q.allocated.is_empty());
    if waiting {
        // Only allocated work is ever protected, and the in-flight list holds each such job
        // once (the nodes' holdings hold a multi-node job once per node). A job that started
        // longer ago than the longest protection in flight is past it: only the recent ones
        // are read.
        let longest = d
            .longest_min_runtime_in_flight()
            .map_or(0, |m| contract::effective_min_runtime_ms(m, config));
        for job in d.in_flight_started_after(now_ms.saturating_sub(longest)) {
            let end = contract::protected_until_ms(job.start_ms, job.min_runtime_ms, config);
            if end > now_ms && next.is_none_or(|n| end < n) {
                next = Some(end);
            }
        }
        if d.share_floor() && d.hourly_floor() {
            // A new clock hour sets every floor back to its share (`hourly`): what waited for
            // a floor may go then, events or not.
            let hour_end = hour_start(now_ms).saturating_add(HOUR_MS);
            if hour_end > now_ms && next.is_none_or(|n| hour_end < n) {
                next = Some(hour_end);
            }
        }
    }
    next
}
