//! The debug allowance: a few GPUs per allocation for debug jobs, ahead of rank order.
//!
//! Place in the flow: the decision cycle ([`crate::domain::decide()`]) places the jobs
//! [`waiters`] names before its rank-ordered pass, and the preemption service walks the same
//! list first, ordering off work that is past its minimum runtime to make room for them
//! (SPEC section 6: a debug job should wait no longer than a victim's grace period, even when
//! its allocation is over-served).
//!
//! The rule, product-wide:
//! - a *debug job* is allocated work of at most [`DEBUG_MAX_GPUS`] GPUs (and no more than the
//!   allowance) with a minimum runtime of at most [`DEBUG_MAX_MIN_RUNTIME_MS`] (15 min);
//! - each allocation may hold at most that many GPUs of debug jobs at once under the
//!   allowance; its debug jobs are taken in queue order until the allowance is used up
//!   (whether or not they fit), counting the debug jobs it already runs;
//! - the allowance only changes the order jobs are taken in. The jobs charge their allocation
//!   like any other, so an allocation that debugs a lot ranks lower for its other work, which
//!   is what keeps the allowance from costing other allocations their share over the window.
//!
//! Why a fixed list: the decision cycle and the preemption pass must agree on who is under the
//! allowance, from the same folded state, with no knowledge of each other's runs.

use fairshare_model::budget::{AccountId, BudgetTree};

use super::state::{DecisionState, QueueKey, Request};

/// Longest minimum runtime a debug job declares (SPEC section 1: "a few GPUs with a minimum
/// runtime of 15 minutes or less").
pub const DEBUG_MAX_MIN_RUNTIME_MS: i64 = 15 * 60_000;

/// Largest debug job, in GPUs ("a few GPUs": what interactive debugging takes on one node).
pub const DEBUG_MAX_GPUS: u32 = 2;

/// GPUs of debug work each allocation may run ahead of rank (eight 2-GPU debug jobs at once),
/// unless set otherwise with [`DecisionState::set_debug_allowance_gpus`] (the simulator does,
/// to compare).
///
/// Chosen with `fairshare-sim`: on Helios (256 and 384 GPUs) and msft-itp (384 and 512 GPUs,
/// 30 days) it brings the debug p90 wait to 10 s, where 4 GPUs left msft-itp's bursts of
/// short jobs waiting 13 min at p90 and 8 GPUs 4 min; owed delivery moved by no more than
/// run-to-run noise (about 2 points either way) against no allowance at all.
pub const DEFAULT_DEBUG_ALLOWANCE_GPUS: u32 = 16;

/// Whether a job of `gpus` GPUs and minimum runtime `min_runtime_ms` is a debug job under an
/// allowance of `allowance` GPUs.
pub fn is_debug(gpus: u64, min_runtime_ms: i64, allowance: u32) -> bool {
    min_runtime_ms > 0
        && min_runtime_ms <= DEBUG_MAX_MIN_RUNTIME_MS
        && gpus <= u64::from(DEBUG_MAX_GPUS.min(allowance))
}

/// Whether a queued request is a debug job under the largest allowance: the jobs each queue
/// lists apart for the debug pass.
pub fn is_candidate(request: &Request) -> bool {
    is_debug(
        request.shape.total_gpus(),
        request.min_runtime_ms,
        DEBUG_MAX_GPUS,
    )
}

/// A queued debug job under its allocation's allowance.
#[derive(Debug, Clone, Copy)]
pub struct DebugWaiter<'s> {
    /// Its allocation's account.
    pub leaf: AccountId,
    /// Its allocation path.
    pub allocation: &'s str,
    /// Its queue entry.
    pub key: &'s QueueKey,
    /// What it asks for.
    pub request: Request,
}

/// Whether any debug job is queued and the allowance is on: without, [`waiters`] is empty and
/// a caller need not work out the order it takes.
pub fn any_queued(state: &DecisionState) -> bool {
    state.debug_allowance_gpus() > 0 && state.queues.values().any(|q| !q.debug.is_empty())
}

/// Whether allocation `leaf` of `tree` has a debug allowance at all: not one with no share of
/// the cluster (share 0 on its path), which ranks after every allocation with a share and gets
/// only GPUs they leave, so no allowance may put its jobs first.
pub fn has_allowance(tree: &BudgetTree, leaf: AccountId) -> bool {
    tree.fractions().get(leaf).is_some_and(|f| f.num != 0)
}

/// The queued debug jobs under their allocation's allowance, allocations in `order` (the
/// cycle's opening rank order), each allocation's jobs in queue order.
pub fn waiters<'s>(
    state: &'s DecisionState,
    tree: &BudgetTree,
    order: &[AccountId],
) -> Vec<DebugWaiter<'s>> {
    let allowance = state.debug_allowance_gpus();
    let mut out = Vec::new();
    if !any_queued(state) {
        return out;
    }
    let held = held_by_allocation(state, tree, allowance);
    for &leaf in order {
        if !has_allowance(tree, leaf) {
            continue;
        }
        let path = tree.accounts[leaf].path.as_str();
        let Some((allocation, queue)) = state.queues.get_key_value(path) else {
            continue;
        };
        let mut left = u64::from(allowance).saturating_sub(held[leaf]);
        for (key, request) in &queue.debug {
            if left == 0 {
                break;
            }
            let gpus = request.shape.total_gpus();
            if is_debug(gpus, request.min_runtime_ms, allowance) && gpus <= left {
                left -= gpus;
                out.push(DebugWaiter {
                    leaf,
                    allocation,
                    key,
                    request: *request,
                });
            }
        }
    }
    out
}

/// GPUs each allocation's debug jobs hold now (placed or running, not ordered off), by
/// account id.
fn held_by_allocation(state: &DecisionState, tree: &BudgetTree, allowance: u32) -> Vec<u64> {
    let mut held = vec![0u64; tree.accounts.len()];
    for (_, load) in state.loads.iter() {
        for (_, holding) in &load.holdings {
            let h = &holding.holder;
            let debug =
                is_debug(h.gpus, h.min_runtime_ms, allowance) && h.preempt_deadline_ms.is_none();
            if let (true, Some(id)) = (debug, h.account) {
                held[id] = held[id].saturating_add(u64::from(holding.gpus));
            }
        }
    }
    held
}
