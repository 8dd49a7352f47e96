//! The GPUs a waiting job could get: free now, soon free, and who holds the rest.
//!
//! Place in the flow: [`crate::domain::victims`] builds one [`View`] per call from the folded
//! state. It walks waiting allocated jobs in rank order and gives each the GPUs it would get
//! from the decision service (`View::find`, `View::take`), so the first job that does not fit
//! is exactly the one that needs victims, and victims are searched only on nodes the waiter
//! may use.
//!
//! Rules (the same as the decision service's placement, so the two agree on what fits):
//! - A node takes the waiter only if it is registered, not cordoned, no maintenance window is in
//!   progress and the next window closes the node ([`Window::closes_at`], a grace before it
//!   starts) no earlier than the waiter's protection would end (`now + min_runtime`).
//! - GPUs held by a job already ordered off count as free: they are free by its grace deadline
//!   at the latest, and counting them stops the service from ordering more victims for a job
//!   that is already being made room for.
//! - GPUs promised to a waiting job ([`fairshare_decision::domain::promise`]), and GPUs of
//!   victims ordered off for a job that still waits, count for that job alone: the decision
//!   cycle hands them to it and withholds them from everyone else. The walk adds them while
//!   it considers that job (`View::claim`) and takes them away again if the job does not fit
//!   (`View::unclaim`). Without this a better-ranked waiter would "take" them in the walk, the
//!   job they were freed for would look short again, and it would get victims once more.
//! - Single-node jobs take the node with the fewest available GPUs that holds them, on equal
//!   GPUs a node in use before a wholly available one, then the lowest name; multi-node jobs
//!   take wholly available nodes of exactly their GPUs per node.

use std::cell::Cell;
use std::sync::Arc;

use fairshare_decision::domain::state::{DecisionState, Holding, Window};
use fairshare_model::shape::Shape;

use super::state::PreemptionState;

/// One node as a waiter sees it.
#[derive(Debug, Clone)]
pub(crate) struct NodeView<'s> {
    pub name: &'s str,
    pub capacity: u32,
    /// GPUs nobody holds.
    pub free: u32,
    /// GPUs held by jobs already ordered off.
    pub pending: u32,
    /// GPUs given to higher-ranked waiters during this call.
    pub taken: u32,
    pub cordoned: bool,
    pub windows: &'s [Window],
    pub holdings: &'s [(Arc<str>, Holding)],
    /// GPUs held beyond the node's capacity: a node registered again with fewer GPUs while
    /// its work runs. The first GPUs its work frees go to paying this back, not to a waiter.
    pub overcommit: u32,
    /// GPUs of unallocated work not yet ordered off (always preemptible).
    pub unallocated: u32,
    /// Whether allocated work of an allocation no longer in the budget tree, not yet ordered
    /// off, runs here (it has no claim, so any waiter may take it once past its minimum
    /// runtime).
    pub outside_tree: bool,
}

impl NodeView<'_> {
    /// GPUs a waiter could have without preempting anyone new.
    pub fn available(&self) -> u32 {
        self.room_with(0)
    }

    /// GPUs a waiter could have if `extra` more GPUs of work left the node too.
    pub fn room_with(&self, extra: u32) -> u32 {
        let gain = u64::from(self.free) + u64::from(self.pending) + u64::from(extra);
        let owed = u64::from(self.taken) + u64::from(self.overcommit);
        u32::try_from(gain.saturating_sub(owed)).unwrap_or(u32::MAX)
    }

    /// GPUs of work that must leave the node, beyond what is already leaving, before `need`
    /// GPUs are free on it for a waiter.
    pub fn shortfall(&self, need: u32) -> u32 {
        let want = u64::from(need) + u64::from(self.taken) + u64::from(self.overcommit);
        let gain = u64::from(self.free) + u64::from(self.pending);
        u32::try_from(want.saturating_sub(gain)).unwrap_or(u32::MAX)
    }

    /// Whether the node takes work protected until `protected_until` at `now`.
    pub fn accepts(&self, now: i64, protected_until: i64) -> bool {
        if self.cordoned {
            return false;
        }
        self.windows.iter().all(|w| {
            // Over, or far enough ahead that the protection ends before it closes the node,
            // as the decision cycle places ([`Window::closes_at`]).
            let closes = w.closes_at();
            w.end_ms <= now || (closes > now && protected_until <= closes)
        })
    }
}

/// GPUs on one node that count for one waiting job alone: `(node index, free, pending)`.
type Claim = (usize, u32, u32);

/// Every registered node, in name order.
#[derive(Debug, Clone)]
pub(crate) struct View<'s> {
    pub nodes: Vec<NodeView<'s>>,
    /// Per waiting job with GPUs promised or being freed for it, what counts for it alone
    /// (left out of the nodes' `free` and `pending`), by job id.
    claims: Vec<(&'s str, Vec<Claim>)>,
    /// Per node, `(free, pending)` as [`View::new`] made them, for [`View::reset`].
    made: Vec<(u32, u32)>,
    /// The earliest time after which a victim or plan held back for its lost work in this
    /// call could go ([`View::note_retry`]): each search's judge notes it here.
    retry_at: Cell<Option<i64>>,
    /// The folded decision state the view was made from (for questions about the queue).
    pub decision: &'s DecisionState,
}

impl<'s> View<'s> {
    /// The nodes of `state` as waiters see them at `now`.
    pub fn new(state: &'s PreemptionState, now: i64) -> View<'s> {
        let d = state.decision();
        let mut nodes: Vec<NodeView<'s>> = d
            .nodes_with_loads()
            .map(|row| NodeView {
                name: row.name,
                capacity: row.node.gpus,
                free: row.node.gpus.saturating_sub(row.used()),
                // Kept with the node's load, so the holdings need not be read here.
                pending: row.load.map_or(0, |l| l.ordered_off),
                taken: 0,
                cordoned: row.node.cordoned,
                windows: row.windows,
                holdings: row.holdings(),
                overcommit: row.used().saturating_sub(row.node.gpus),
                unallocated: row.load.map_or(0, |l| l.unallocated),
                outside_tree: row.load.is_some_and(|l| l.outside_tree > 0),
            })
            .collect();
        let mut claims: Vec<(&'s str, Vec<Claim>)> = Vec::new();
        let mut claim =
            |job: &'s str, c: Claim| match claims.binary_search_by(|(j, _)| (*j).cmp(job)) {
                Ok(i) => claims[i].1.push(c),
                Err(i) => claims.insert(i, (job, vec![c])),
            };
        // Promised GPUs, shared out as the decision cycle shares them.
        let mut unheld: Vec<u32> = nodes.iter().map(|n| n.free).collect();
        let position = |name: &str| nodes.binary_search_by(|n| n.name.cmp(name)).ok();
        for (job, parts) in d.promise_shares(now, &mut unheld, position) {
            for (i, part) in parts {
                nodes[i].free -= part;
                claim(job, (i, part, 0));
            }
        }
        // Victims still leaving for a job that waits: few at any time, so the job table is
        // searched only for them.
        for (i, n) in nodes.iter_mut().enumerate() {
            if n.pending == 0 {
                continue;
            }
            for (victim, h) in n.holdings {
                if !is_ordered_off(h) {
                    continue;
                }
                let Some(waiter) = d.job(victim).and_then(|j| j.last_order.as_ref()) else {
                    continue;
                };
                // The fold made a promise for the waiter with the order; once it lapses (a
                // victim overstaying its deadline by the hold) the GPUs are anyone's again.
                let Some((waiter, _)) = d.job_entry(&waiter.for_job_id) else {
                    continue;
                };
                if d.promise_for(waiter, now).is_some() {
                    let part = h.gpus.min(n.pending);
                    n.pending -= part;
                    claim(waiter, (i, 0, part));
                }
            }
        }
        let made = nodes.iter().map(|n| (n.free, n.pending)).collect();
        View {
            nodes,
            claims,
            made,
            retry_at: Cell::new(None),
            decision: d,
        }
    }

    /// Notes that a search held victims back until `at` (their next checkpoint).
    pub fn note_retry(&self, at: Option<i64>) {
        if let Some(at) = at
            && self.retry_at.get().is_none_or(|r| at < r)
        {
            self.retry_at.set(Some(at));
        }
    }

    /// The earliest time noted by [`View::note_retry`].
    pub fn retry_at(&self) -> Option<i64> {
        self.retry_at.get()
    }

    /// Puts the retry time back to `at`, as it was before a debug build's check judged jobs a
    /// release build skips.
    #[cfg(debug_assertions)]
    pub(crate) fn restore_retry(&self, at: Option<i64>) {
        self.retry_at.set(at);
    }

    /// The view as [`View::new`] made it, whatever a walk claimed and took since: the
    /// packing moves look at the nodes as the fair-share walk found them, before it gave
    /// GPUs away, without reading the state again.
    pub fn reset(&mut self) {
        for (n, &(free, pending)) in self.nodes.iter_mut().zip(&self.made) {
            n.free = free;
            n.pending = pending;
            n.taken = 0;
        }
    }

    /// Adds what counts for `job_id` alone to the nodes, while the walk considers that job.
    /// True if there was anything.
    pub fn claim(&mut self, job_id: &str) -> bool {
        self.adjust_claim(job_id, true)
    }

    /// Whether anything counts for `job_id` alone.
    pub fn has_claim(&self, job_id: &str) -> bool {
        !self.claims.is_empty()
            && self
                .claims
                .binary_search_by(|(j, _)| (*j).cmp(job_id))
                .is_ok()
    }

    /// Takes away again what [`Self::claim`] added, when the job did not fit.
    pub fn unclaim(&mut self, job_id: &str) {
        self.adjust_claim(job_id, false);
    }

    fn adjust_claim(&mut self, job_id: &str, add: bool) -> bool {
        if self.claims.is_empty() {
            return false;
        }
        let Ok(k) = self.claims.binary_search_by(|(j, _)| (*j).cmp(job_id)) else {
            return false;
        };
        for &(i, free, pending) in &self.claims[k].1 {
            let n = &mut self.nodes[i];
            if add {
                n.free = n.free.saturating_add(free);
                n.pending = n.pending.saturating_add(pending);
            } else {
                n.free = n.free.saturating_sub(free);
                n.pending = n.pending.saturating_sub(pending);
            }
        }
        true
    }

    /// Whether a job of `shape` could ever run on nodes that take it (capacity, not free GPUs).
    pub fn could_ever_fit(&self, shape: Shape, now: i64, protected_until: i64) -> bool {
        let usable = self
            .nodes
            .iter()
            .filter(|n| n.accepts(now, protected_until));
        if shape.nodes <= 1 {
            usable.clone().any(|n| n.capacity >= shape.gpus_per_node)
        } else {
            usable.filter(|n| n.capacity == shape.gpus_per_node).count() >= shape.nodes as usize
        }
    }

    /// Node indexes a job of `shape` would get now, without new victims.
    pub fn find(&self, shape: Shape, now: i64, protected_until: i64) -> Option<Vec<usize>> {
        let usable = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.accepts(now, protected_until));
        if shape.nodes <= 1 {
            // As the decision cycle's best fit: on equal room a node in use before a wholly
            // free one, so the walk leaves whole nodes whole where the cycle will.
            usable
                .filter(|(_, n)| n.available() >= shape.gpus_per_node)
                .min_by_key(|(i, n)| (n.available(), n.available() >= n.capacity, *i))
                .map(|(i, _)| vec![i])
        } else {
            let whole: Vec<usize> = usable
                .filter(|(_, n)| {
                    n.capacity == shape.gpus_per_node && n.taken == 0 && n.available() == n.capacity
                })
                .map(|(i, _)| i)
                .take(shape.nodes as usize)
                .collect();
            (whole.len() == shape.nodes as usize).then_some(whole)
        }
    }

    /// Per node, the GPUs of unallocated work not yet ordered off (always preemptible).
    pub fn unallocated_gpus(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.unallocated).collect()
    }

    /// Whether a job of `shape` would fit if the unallocated work of each node (`unallocated`,
    /// from [`View::unallocated_gpus`]) left. A count only: which victims, and on which
    /// nodes, is `victims::search::choose`'s work.
    pub fn fits_without_unallocated(
        &self,
        unallocated: &[u32],
        shape: Shape,
        now: i64,
        protected_until: i64,
    ) -> bool {
        let mut usable = self
            .nodes
            .iter()
            .zip(unallocated)
            .filter(|(n, _)| n.accepts(now, protected_until))
            .map(|(n, &u)| (n, n.room_with(u)));
        if shape.nodes <= 1 {
            usable.any(|(_, room)| room >= shape.gpus_per_node)
        } else {
            usable
                .filter(|(n, room)| {
                    n.capacity == shape.gpus_per_node && n.taken == 0 && *room >= n.capacity
                })
                .count()
                >= shape.nodes as usize
        }
    }

    /// Gives `gpus` on each of `nodes` to a waiter.
    pub fn take(&mut self, nodes: &[usize], gpus: u32) {
        for &i in nodes {
            if let Some(n) = self.nodes.get_mut(i) {
                n.taken = n.taken.saturating_add(gpus);
            }
        }
    }
}

/// Whether the job behind a holding already has a preemption order (its GPUs are on their
/// way back).
///
/// The state's order index holds exactly the placed jobs with a deadline (an order enters it
/// when the decision fold accepts the order, and leaves when the job stops), and the fold
/// copies that deadline onto the job's holdings, so the holding answers without a search of
/// the order index by job id.
pub(crate) fn is_ordered_off(holding: &Holding) -> bool {
    holding.holder.preempt_deadline_ms.is_some()
}
