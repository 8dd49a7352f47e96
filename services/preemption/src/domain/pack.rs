//! Packing moves: small jobs moved off a node so that a blocked single-node job fits there,
//! when free GPUs on other nodes take them at once.
//!
//! Place in the flow: [`crate::domain::decide_preemptions`] calls [`moves`] when the
//! fair-share walk ends at a blocked waiter ([`crate::domain::FairShare::Blocked`]): no rule
//! lets it take anyone's work. In a full cluster the free GPUs are then often scattered, a few
//! on each of several nodes, none with room for the waiting jobs, which are all bigger than
//! every hole (SPEC section 6: "fragmentation is the enemy"). The simulator's idle split files
//! such GPUs under "fits once work past its minimum runtime leaves": on 30 days of msft-itp at
//! 512 GPUs they were 2.1% of the GPU time available under contention, and a throwaway count
//! found that for 94% of them the jobs in the way would have fitted the holes elsewhere.
//!
//! A move orders off resumable jobs on one node so that a waiter fits there, and only if the
//! free GPUs of the other nodes hold every one of them at once. The moved jobs requeue (in
//! their old place in the queue), and the decision service's placement, which puts a
//! single-node job on the node with the fewest free GPUs that holds it, puts them in those
//! holes: the emptied node has more free GPUs than any hole, since no hole held the waiter. So
//! the moved jobs' allocations lose a stop, a restart and the work since their last checkpoint,
//! and no GPUs; the waiter starts; and GPUs that would have stayed idle run work.
//!
//! Which waiter: the blocked one if it fits on one node; otherwise (or if no move helps it)
//! the first of the waiters behind it that the walk met ([`Line::behind`]) that a move helps,
//! off the nodes the blocked waiter's reservation holds, both for the emptied node and for the
//! holes, as the decision cycle keeps those nodes for the blocked waiter alone.
//!
//! Multi-node waiters are not helped. Emptying whole nodes for them (every job on the cheapest
//! nodes of their size moved at once) was tried on msft-itp at 512 GPUs, 30 days, medians of 5
//! runs with nudged arrivals: occupancy under contention rose to 99.2% (from 98.1%), but owed
//! delivery fell to 99.40% (from 99.53%) and lost work rose to 1.08% (from 0.96%); on Helios
//! nothing moved beyond the spread.
//!
//! Which jobs may be moved (whatever their allocation's rank, since they keep running):
//! - started, single-node, resumable, not already ordered off;
//! - unallocated, or allocated and past its minimum runtime (never a protected job).
//!
//! Moving only jobs that checkpointed in the last 10 minutes (a floor order's limit then) was
//! tried on msft-itp at 512 GPUs, 30 days, 5 runs with nudged arrivals: occupancy under
//! contention 97.7/97.9/98.0% (lowest/median/highest) against 97.8/98.1/98.2% with no such
//! limit and 96.7/97.1/97.2% with no moves; lost work 0.87/0.88/0.93% against 0.94/0.96/0.99%
//! and 0.84/0.87/0.89%. Waiting for a fresh checkpoint leaves a node idle meanwhile, which
//! costs about what it saves, so there is no limit: the cheapest set is taken.
//!
//! When a move is tried at all:
//! - no preemption order is outstanding and no preempted job awaits its requeue: those GPUs
//!   and jobs are on their way, and a second move planned before they land could count the
//!   same hole twice;
//! - no queued job fits the free GPUs as they are: otherwise the next decision cycle places
//!   it there, and the holes are not free for the moved jobs.
//!
//! Which node: the one whose cheapest sufficient set of movers loses the least work, then
//! moves the fewest jobs, then comes first by name. The holes must hold the set whether the
//! decision service places the moved jobs largest first or smallest first, since it places
//! them in rank order, which this pass does not fix.

use fairshare_decision::domain::reserve;
use fairshare_decision::domain::state::Holding;

use super::config::Config;
use super::contract;
use super::state::PreemptionState;
use super::victims::{Line, Victim, Waiter, node_mask};
use super::view::{NodeView, View, is_ordered_off};

/// Most movable jobs looked at on one node: the subsets of a node's movers are enumerated,
/// and an 8-GPU node holds at most 8 jobs.
const MOVERS_PER_NODE: usize = 12;

/// Jobs to move so that a blocked waiter fits on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackPlan<'s> {
    /// The waiter the move is for.
    pub waiter: Waiter<'s>,
    /// The blocked job it waits behind, when it is not that job itself.
    pub behind: Option<&'s str>,
    /// The node it fits on once the moved jobs are gone.
    pub node: &'s str,
    /// The jobs to order off; each fits free GPUs of another node.
    pub movers: Vec<Victim<'s>>,
    /// Their lost work in all, GPU-ms.
    pub lost_gpu_ms: u128,
}

/// A job that may be moved, with the time its new run would be protected until.
#[derive(Debug, Clone, Copy)]
struct Mover<'s> {
    victim: Victim<'s>,
    gpus: u32,
    protected_until: i64,
}

/// The packing move for the blocked waiter of `line`, or failing that for the first waiter
/// behind it that one helps, off the nodes the blocked waiter's reservation holds; if any is
/// allowed and possible now (see the module doc).
pub fn moves<'s>(
    state: &'s PreemptionState,
    line: &Line<'s>,
    now: i64,
    cfg: &Config,
) -> Option<PackPlan<'s>> {
    moves_in(state, line, None, now, cfg)
}

/// [`moves`], given the node view of `state` at `now` if the caller has it (the fair-share
/// walk's, [reset](View::reset)); built here otherwise, and only when a move is looked for.
pub(crate) fn moves_in<'s>(
    state: &'s PreemptionState,
    line: &Line<'s>,
    view: Option<View<'s>>,
    now: i64,
    cfg: &Config,
) -> Option<PackPlan<'s>> {
    let single = |w: &Waiter<'_>| w.shape.nodes <= 1 && w.shape.gpus_per_node > 0;
    if !cfg.packing || (!single(&line.first) && !line.behind.iter().any(single)) {
        return None;
    }
    if !state.orders().is_empty() || !state.awaiting_requeue().is_empty() {
        return None;
    }
    let d = state.decision();
    if d.any_placeable_shape_fits() {
        return None;
    }
    let view = view.unwrap_or_else(|| View::new(state, now));
    let mut packer = Packer::new(view, now, cfg);
    if single(&line.first)
        && let Some(plan) = packer.move_for(line.first, &[])
    {
        return Some(plan);
    }
    // Waiters of the same shape and protection fare alike: each is tried once.
    let mut tried: Vec<(u32, i64)> = Vec::new();
    let mut off_limits: Option<Vec<bool>> = None;
    for w in line.behind.iter().filter(|w| single(w)) {
        let kind = (w.shape.gpus_per_node, w.min_runtime_ms);
        if tried.contains(&kind) {
            continue;
        }
        tried.push(kind);
        if !packer.could_help(w.shape.gpus_per_node) {
            continue;
        }
        // The decision cycle keeps the blocked waiter's reserved nodes from the jobs behind
        // it: neither the emptied node nor the holes may be there.
        let off = off_limits.get_or_insert_with(|| {
            let first = &line.request;
            let id = line.first.job_id;
            let reserved = reserve::reserved_nodes(d, id, first.shape, first.min_runtime_ms, now);
            node_mask(&packer.view, &reserved)
        });
        if let Some(plan) = packer.move_for(*w, off) {
            return Some(PackPlan {
                behind: Some(line.first.job_id),
                ..plan
            });
        }
    }
    None
}

/// One call's search: the view, and each node's movable jobs once looked at.
struct Packer<'s, 'c> {
    view: View<'s>,
    now: i64,
    cfg: &'c Config,
    /// Per node, its movable jobs, cheapest first (filled when first needed).
    movers: Vec<Option<Vec<Mover<'s>>>>,
    /// The most free GPUs on an uncordoned node, and the next most on another: the largest
    /// hole any node but the first could send a job to is the first, and the first's is the
    /// second.
    largest: [(u32, usize); 2],
    /// Free GPUs of the uncordoned nodes in all.
    total_free: u32,
}

impl<'s, 'c> Packer<'s, 'c> {
    fn new(view: View<'s>, now: i64, cfg: &'c Config) -> Self {
        let mut largest = [(0, usize::MAX); 2];
        let mut total_free = 0u32;
        for (i, n) in view.nodes.iter().enumerate() {
            if n.cordoned {
                continue;
            }
            total_free = total_free.saturating_add(n.free);
            if n.free > largest[0].0 {
                largest = [(n.free, i), largest[0]];
            } else if n.free > largest[1].0 {
                largest[1] = (n.free, i);
            }
        }
        let movers = vec![None; view.nodes.len()];
        Packer {
            view,
            now,
            cfg,
            movers,
            largest,
            total_free,
        }
    }

    /// The largest hole outside node `x` (an upper bound: reservations and maintenance may
    /// rule it out).
    fn largest_hole_besides(&self, x: usize) -> u32 {
        if self.largest[0].1 == x {
            self.largest[1].0
        } else {
            self.largest[0].0
        }
    }

    /// Whether some node could be emptied for `need` GPUs, by the counts alone.
    fn could_help(&mut self, need: u32) -> bool {
        (0..self.view.nodes.len()).any(|x| self.shortfall_coverable(x, need).is_some())
    }

    /// The GPUs node `x` lacks for `need`, if its movable jobs that fit the largest hole
    /// elsewhere could cover them.
    fn shortfall_coverable(&mut self, x: usize, need: u32) -> Option<u32> {
        let node = &self.view.nodes[x];
        // Pending GPUs do not count here (they are not free for the moved jobs' room);
        // GPUs held beyond the node's capacity must be freed too.
        let shortfall = need
            .saturating_add(node.overcommit)
            .saturating_sub(node.free);
        if node.cordoned || node.capacity < need || shortfall == 0 {
            return None;
        }
        let hole = self.largest_hole_besides(x);
        if hole == 0 || self.total_free.saturating_sub(node.free) < shortfall {
            return None;
        }
        let (now, cfg) = (self.now, self.cfg);
        let movers = self.movers[x].get_or_insert_with(|| movable(&self.view.nodes[x], now, cfg));
        let coverable: u32 = movers
            .iter()
            .filter(|m| m.gpus <= hole)
            .map(|m| m.gpus)
            .fold(0, u32::saturating_add);
        (coverable >= shortfall).then_some(shortfall)
    }

    /// The cheapest move that lets single-node `waiter` fit, using no node `off_limits` marks.
    fn move_for(&mut self, waiter: Waiter<'s>, off_limits: &[bool]) -> Option<PackPlan<'s>> {
        let usable = |i: usize| !off_limits.get(i).copied().unwrap_or(false);
        let need = waiter.shape.gpus_per_node;
        let now = self.now;
        let waiter_until = now.saturating_add(waiter.min_runtime_ms);
        let mut best: Option<(Key, PackPlan<'s>)> = None;
        for x in 0..self.view.nodes.len() {
            if !usable(x) || !self.view.nodes[x].accepts(now, waiter_until) {
                continue;
            }
            let Some(shortfall) = self.shortfall_coverable(x, need) else {
                continue;
            };
            let holes = Holes {
                total: self.total_free.saturating_sub(self.view.nodes[x].free),
                largest: self.largest_hole_besides(x),
            };
            let (view, movers) = (&self.view, self.movers[x].as_deref().unwrap_or(&[]));
            let placeable = |set: &[Mover<'s>]| fits_holes(view, x, off_limits, set, now);
            let Some(set) = cheapest_set(movers, shortfall, holes, placeable) else {
                continue;
            };
            let node = view.nodes[x].name;
            let key = key_of(&set, node);
            if best.as_ref().is_some_and(|(k, _)| *k <= key) {
                continue;
            }
            let plan = PackPlan {
                waiter,
                behind: None,
                node,
                movers: set.iter().map(|m| m.victim).collect(),
                lost_gpu_ms: key.0,
            };
            best = Some((key, plan));
        }
        best.map(|(_, plan)| plan)
    }
}

/// How plans compare: lost work, jobs moved, node name.
type Key<'s> = (u128, usize, &'s str);

fn key_of<'s>(set: &[Mover<'_>], node: &'s str) -> Key<'s> {
    let lost = set.iter().map(|m| m.victim.lost_gpu_ms).sum();
    (lost, set.len(), node)
}

/// The jobs on `node` that may be moved now, cheapest first.
fn movable<'s>(node: &NodeView<'s>, now: i64, cfg: &Config) -> Vec<Mover<'s>> {
    let mut out: Vec<Mover<'s>> = node
        .holdings
        .iter()
        .filter_map(|(job_id, h)| mover(job_id, h, now, cfg))
        .collect();
    out.sort_by(|a, b| {
        (a.victim.lost_gpu_ms, a.gpus, a.victim.job_id).cmp(&(
            b.victim.lost_gpu_ms,
            b.gpus,
            b.victim.job_id,
        ))
    });
    out.truncate(MOVERS_PER_NODE);
    out
}

fn mover<'s>(job_id: &'s str, h: &'s Holding, now: i64, cfg: &Config) -> Option<Mover<'s>> {
    let holder = &h.holder;
    let single_node = holder.gpus == u64::from(h.gpus);
    if !holder.started || !holder.resumable || !single_node || is_ordered_off(h) {
        return None;
    }
    let unallocated = contract::is_unallocated(holder.min_runtime_ms);
    if !unallocated && contract::is_protected(holder.start_ms, holder.min_runtime_ms, now, cfg) {
        return None;
    }
    let lost_gpu_ms =
        contract::lost_work_gpu_ms(holder.gpus, holder.start_ms, true, true, now, cfg);
    let min_runtime = contract::effective_min_runtime_ms(holder.min_runtime_ms, cfg);
    Some(Mover {
        victim: Victim {
            job_id,
            allocation: &holder.allocation,
            unallocated,
            gpus: holder.gpus,
            lost_gpu_ms,
            debug_by_window: false,
        },
        gpus: h.gpus,
        protected_until: now.saturating_add(min_runtime.max(0)),
    })
}

/// The cheapest subset of `movers` (by lost work, then size) holding at least `shortfall`
/// GPUs that `placeable` accepts. `holes` bounds what `placeable` can accept, so the sets it
/// would refuse for size alone are never offered to it (with 12 movers, thousands of sets a
/// node).
fn cheapest_set<'s>(
    movers: &[Mover<'s>],
    shortfall: u32,
    holes: Holes,
    placeable: impl Fn(&[Mover<'s>]) -> bool,
) -> Option<Vec<Mover<'s>>> {
    let n = movers.len();
    // Movers too big for every hole: no set holding one of them can be placed.
    let too_big: u32 = movers
        .iter()
        .enumerate()
        .filter(|(_, m)| m.gpus > holes.largest)
        .fold(0, |mask, (i, _)| mask | (1 << i));
    let mut sets: Vec<(u128, u32, u32)> = (1u32..(1 << n))
        .filter(|mask| mask & too_big == 0)
        .filter_map(|mask| {
            let (mut gpus, mut lost) = (0u32, 0u128);
            for (i, m) in movers.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    gpus = gpus.saturating_add(m.gpus);
                    lost = lost.saturating_add(m.victim.lost_gpu_ms);
                }
            }
            (gpus >= shortfall && gpus <= holes.total).then_some((lost, mask.count_ones(), mask))
        })
        .collect();
    sets.sort_unstable();
    sets.into_iter().find_map(|(_, _, mask)| {
        let set: Vec<Mover<'s>> = movers
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, m)| *m)
            .collect();
        placeable(&set).then_some(set)
    })
}

/// The free GPUs of the nodes besides the one being emptied, at most: a set of moved jobs
/// larger than `total`, or holding a job larger than `largest`, fits no holes.
#[derive(Debug, Clone, Copy)]
struct Holes {
    total: u32,
    largest: u32,
}

/// Whether the free GPUs of the nodes other than `emptied` hold every job of `set` at once,
/// each on the node with the fewest free GPUs that holds it (the decision service's rule),
/// placed largest first and, again, smallest first.
fn fits_holes(
    view: &View<'_>,
    emptied: usize,
    off_limits: &[bool],
    set: &[Mover<'_>],
    now: i64,
) -> bool {
    // Only nodes with free GPUs can take a moved job (each holds at least one GPU), and in a
    // cluster full enough to need packing they are few: the search reads them alone, in node
    // order, rather than every node for every job of every set tried.
    let holes: Vec<(usize, u32)> = view
        .nodes
        .iter()
        .enumerate()
        .filter(|&(i, n)| {
            n.free > 0 && i != emptied && !off_limits.get(i).copied().unwrap_or(false)
        })
        .map(|(i, n)| (i, n.free))
        .collect();
    let mut by_size = set.to_vec();
    by_size.sort_by_key(|m| std::cmp::Reverse(m.gpus));
    let largest_first = best_fit_all(view, holes.clone(), &by_size, now);
    by_size.reverse();
    largest_first && best_fit_all(view, holes, &by_size, now)
}

/// Places each job of `order` in turn on the hole (`(node index, free GPUs)`, in node order)
/// with the fewest free GPUs that holds it, lowest index on ties; false if one fits none.
fn best_fit_all(
    view: &View<'_>,
    mut holes: Vec<(usize, u32)>,
    order: &[Mover<'_>],
    now: i64,
) -> bool {
    order.iter().all(|m| {
        let hole = holes
            .iter_mut()
            .filter(|(i, free)| {
                *free >= m.gpus
                    && m.gpus > 0
                    && view
                        .nodes
                        .get(*i)
                        .is_some_and(|n| n.accepts(now, m.protected_until))
            })
            .min_by_key(|(i, free)| (*free, *i));
        match hole {
            Some((_, free)) => {
                *free -= m.gpus;
                true
            }
            None => false,
        }
    })
}
