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
//!   progress and the next window starts no earlier than the waiter's protection would end
//!   (`now + min_runtime`).
//! - GPUs held by a job already ordered off count as free: they are free by its grace deadline
//!   at the latest, and counting them stops the service from ordering more victims for a job
//!   that is already being made room for.
//! - Single-node jobs take the node with the fewest available GPUs that holds them (then the
//!   lowest name); multi-node jobs take wholly available nodes of exactly their GPUs per node.

use std::sync::Arc;

use fairshare_decision::domain::state::{Holding, Window};
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
}

impl NodeView<'_> {
    /// GPUs a waiter could have without preempting anyone new.
    pub fn available(&self) -> u32 {
        self.free
            .saturating_add(self.pending)
            .saturating_sub(self.taken)
    }

    /// Whether the node takes work protected until `protected_until` at `now`.
    pub fn accepts(&self, now: i64, protected_until: i64) -> bool {
        if self.cordoned {
            return false;
        }
        self.windows.iter().all(|w| {
            // Over, or far enough ahead that the protection ends first.
            w.end_ms <= now || (w.start_ms > now && protected_until <= w.start_ms)
        })
    }
}

/// Every registered node, in name order.
#[derive(Debug, Clone)]
pub(crate) struct View<'s> {
    pub nodes: Vec<NodeView<'s>>,
}

impl<'s> View<'s> {
    pub fn new(state: &'s PreemptionState) -> View<'s> {
        let nodes = state
            .decision()
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
            })
            .collect();
        View { nodes }
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
            usable
                .filter(|(_, n)| n.available() >= shape.gpus_per_node)
                .min_by_key(|(i, n)| (n.available(), *i))
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
        self.nodes
            .iter()
            .map(|n| {
                n.holdings
                    .iter()
                    .filter(|(_, h)| h.holder.min_runtime_ms <= 0 && !is_ordered_off(h))
                    .map(|(_, h)| h.gpus)
                    .fold(0, u32::saturating_add)
            })
            .collect()
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
            .map(|(n, &u)| (n, n.available().saturating_add(u)));
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
