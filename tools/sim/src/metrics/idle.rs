//! Where the idle GPUs went while work waited: the occupancy shortfall, node by node.
//!
//! Place in the flow: [`measure`](super::measure) tells [`Holes`] about every queue change,
//! placement, start and stop it folds, and calls [`Holes::add`] for each stretch of time
//! between events in which queued work exceeded idle GPUs (the stretches occupancy counts).
//! `add` files each open node's idle GPUs under the first of these that holds at the stretch's
//! start:
//!
//! 1. *awaiting start*: placed, and the launcher has not confirmed the start yet;
//! 2. *a waiting job fits*: some queued job fits the node's free GPUs (a single-node job no
//!    bigger than them, or a multi-node job of the node's size on a wholly free node, with as
//!    many wholly free nodes of that size as it needs). The scheduler chose not to use them: a
//!    reservation kept them, or the next cycle had not run;
//! 3. *victims still stopping*: the smallest waiting allocated job fits once the jobs already
//!    ordered off the node stop (the grace period and the launcher's stop at work);
//! 4. *fits once unallocated work leaves*: it would fit if the node's unallocated work (always
//!    preemptible) were gone too;
//! 5. *fits once work past its minimum runtime leaves*: it would fit only if allocated work past
//!    its minimum runtime left too, which the rank rule allows only for a better-ranked waiter;
//! 6. *nothing waiting fits*: even with every preemptible job gone, no waiting allocated job
//!    fits (protected work holds the rest, or the waiting jobs are all bigger than the node).
//!
//! A wholly free node that only multi-node jobs of its size could use, too few nodes of that
//! size being free, is filed by what holds the other nodes the smallest of them needs: the
//! first of 3 to 6 at which enough nodes of the size would be empty.
//!
//! Why: SPEC section 6 calls fragmentation the enemy of occupancy. Counting only the idle
//! total cannot tell a fragmented cluster (5, 6) from a scheduler that leaves usable GPUs idle
//! (1, 2), the cost of preempting at all (3), or a scheduler that does not preempt what it may
//! (4).
//!
//! Cost: only nodes with idle or pending GPUs are visited (kept in an ordered set), and only
//! under contention.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fairshare_model::shape::Shape;

use super::IdleUnderContention;

/// A running job on one node, as the split needs it.
#[derive(Debug, Clone, Copy)]
struct Holder {
    /// The job's serial number in the measurement.
    job: u32,
    gpus: u32,
    unallocated: bool,
    /// End of its protection from fair-share preemption.
    protected_until_ms: i64,
    /// Ordered off and not stopped yet.
    leaving: bool,
}

/// One node's GPUs.
#[derive(Debug, Default)]
struct Node {
    capacity: u32,
    cordoned: bool,
    /// Placed and not started yet.
    pending: u32,
    holders: Vec<Holder>,
}

impl Node {
    /// Cordoned or out of service: its idle GPUs are not available.
    fn closed(&self) -> bool {
        self.cordoned || self.capacity == 0
    }

    fn running(&self) -> u32 {
        self.holders.iter().map(|h| h.gpus).sum()
    }

    fn free(&self) -> u32 {
        self.capacity
            .saturating_sub(self.running())
            .saturating_sub(self.pending)
    }
}

/// Counts of queued jobs: (all, allocated only).
type Counts = (u32, u32);

/// What the split keeps between events.
#[derive(Debug, Default)]
pub(super) struct Holes {
    nodes: Vec<Node>,
    by_name: HashMap<String, u32>,
    /// Nodes with free or pending GPUs: the only ones `add` visits.
    idle: BTreeSet<u32>,
    /// Queued single-node jobs by GPUs.
    single: BTreeMap<u32, Counts>,
    /// Queued multi-node jobs by GPUs per node, then by node count.
    multi: BTreeMap<u32, BTreeMap<u32, Counts>>,
    /// GPUs running work on closed nodes (cordoned, or left service): in use, so counted as
    /// available beside the open nodes' capacity.
    closed_running: u64,
    /// The split so far.
    pub split: IdleUnderContention,
}

fn count(map: &mut BTreeMap<u32, Counts>, key: u32, allocated: bool, up: bool) {
    let entry = map.entry(key).or_default();
    let step = |c: u32| if up { c + 1 } else { c.saturating_sub(1) };
    entry.0 = step(entry.0);
    if allocated {
        entry.1 = step(entry.1);
    }
    if entry.0 == 0 {
        map.remove(&key);
    }
}

impl Holes {
    /// The node's index, registering it if new.
    pub fn node(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let i = u32::try_from(self.nodes.len()).unwrap_or(u32::MAX);
        self.nodes.push(Node::default());
        self.by_name.insert(name.to_owned(), i);
        i
    }

    /// A node as the measurement's fold now has it: registered with `gpus` (0: left service)
    /// and cordoned or not. A cordoned node's idle GPUs are not available.
    pub fn set_node(&mut self, name: &str, gpus: u32, cordoned: bool) {
        let i = self.node(name);
        self.reopen(i, |n| {
            n.capacity = gpus;
            n.cordoned = cordoned;
        });
    }

    /// GPUs running work on closed nodes.
    pub fn closed_running(&self) -> u64 {
        self.closed_running
    }

    /// Changes node `i` with `change`, moving its running GPUs in or out of the closed count.
    fn reopen(&mut self, i: u32, change: impl FnOnce(&mut Node)) {
        let n = &mut self.nodes[i as usize];
        let closed_before = if n.closed() {
            u64::from(n.running())
        } else {
            0
        };
        change(n);
        let closed_after = if n.closed() {
            u64::from(n.running())
        } else {
            0
        };
        self.closed_running = (self.closed_running + closed_after).saturating_sub(closed_before);
        self.touch(i);
    }

    /// A job joined (`up`) or left the queue.
    pub fn queue(&mut self, shape: Shape, allocated: bool, up: bool) {
        if shape.nodes <= 1 {
            count(&mut self.single, shape.gpus_per_node, allocated, up);
        } else {
            let by_nodes = self.multi.entry(shape.gpus_per_node).or_default();
            count(by_nodes, shape.nodes, allocated, up);
            if by_nodes.is_empty() {
                self.multi.remove(&shape.gpus_per_node);
            }
        }
    }

    /// GPUs placed on a node, not started yet (`up`), or no longer pending.
    pub fn pending(&mut self, node: u32, gpus: u32, up: bool) {
        if let Some(n) = self.nodes.get_mut(node as usize) {
            n.pending = if up {
                n.pending.saturating_add(gpus)
            } else {
                n.pending.saturating_sub(gpus)
            };
            self.touch(node);
        }
    }

    /// Job `job` started holding `gpus` on `node`.
    pub fn start(
        &mut self,
        node: u32,
        job: u32,
        gpus: u32,
        unallocated: bool,
        protected_until_ms: i64,
    ) {
        if let Some(n) = self.nodes.get_mut(node as usize) {
            n.holders.push(Holder {
                job,
                gpus,
                unallocated,
                protected_until_ms,
                leaving: false,
            });
            if n.closed() {
                self.closed_running += u64::from(gpus);
            }
            self.touch(node);
        }
    }

    /// Job `job`, running on `node`, was ordered off.
    pub fn ordered_off(&mut self, node: u32, job: u32) {
        if let Some(n) = self.nodes.get_mut(node as usize) {
            for h in n.holders.iter_mut().filter(|h| h.job == job) {
                h.leaving = true;
            }
        }
    }

    /// Job `job` stopped running on `node`.
    pub fn stop(&mut self, node: u32, job: u32) {
        if let Some(n) = self.nodes.get_mut(node as usize) {
            let before = n.running();
            n.holders.retain(|h| h.job != job);
            if n.closed() {
                let gone = u64::from(before.saturating_sub(n.running()));
                self.closed_running = self.closed_running.saturating_sub(gone);
            }
            self.touch(node);
        }
    }

    fn touch(&mut self, i: u32) {
        let n = &self.nodes[i as usize];
        if n.free() > 0 || n.pending > 0 {
            self.idle.insert(i);
        } else {
            self.idle.remove(&i);
        }
    }

    /// Files the idle GPUs of `[from, to)`, a stretch under contention.
    pub fn add(&mut self, from: i64, to: i64) {
        let Ok(dt) = u128::try_from(to - from) else {
            return;
        };
        if dt == 0 {
            return;
        }
        let smallest_single = self.single.keys().next().copied();
        let smallest_allocated = self.single.iter().find(|(_, c)| c.1 > 0).map(|(&g, _)| g);
        let ladders = self.multi_node_ladders(from);
        let s = &mut self.split;
        for &i in &self.idle {
            let n = &self.nodes[i as usize];
            if n.closed() {
                continue;
            }
            s.awaiting_start_gpu_ms += u128::from(n.pending) * dt;
            let free = n.free();
            if free == 0 {
                continue;
            }
            let idle = u128::from(free) * dt;
            let whole = free == n.capacity;
            let multi = self.multi.get(&n.capacity);
            if smallest_single.is_some_and(|g| g <= free) {
                s.waiting_job_fits_gpu_ms += idle;
                continue;
            }
            // A wholly free node where only multi-node jobs of its size could go: what keeps
            // them off it is the other nodes they need, so it is filed by what would have to
            // leave those (the ladder of its size).
            if whole && let Some(ladder) = ladders.iter().find(|l| l.capacity == n.capacity) {
                *ladder.file(s) += idle;
                continue;
            }
            // The room the smallest waiting allocated job needs here: its GPUs, or the whole
            // node for a multi-node job of this node's size.
            let need = match (
                smallest_allocated,
                multi.is_some_and(|m| m.values().any(|c| c.1 > 0)),
            ) {
                (Some(g), _) if g <= n.capacity => g,
                (_, true) => n.capacity,
                _ => {
                    s.nothing_fits_gpu_ms += idle;
                    continue;
                }
            };
            let (mut leaving, mut unallocated, mut past) = (0, 0, 0);
            for h in &n.holders {
                if h.leaving {
                    leaving += h.gpus;
                } else if h.unallocated {
                    unallocated += h.gpus;
                } else if h.protected_until_ms <= from {
                    past += h.gpus;
                }
            }
            let free = free + leaving;
            if leaving > 0 && free >= need {
                s.victims_stopping_gpu_ms += idle;
            } else if free + unallocated >= need {
                s.fits_without_unallocated_gpu_ms += idle;
            } else if free + unallocated + past >= need {
                s.fits_without_past_minimum_gpu_ms += idle;
            } else {
                s.nothing_fits_gpu_ms += idle;
            }
        }
    }
}

/// For the multi-node jobs waiting for nodes of one size: how many open nodes of that size
/// are wholly free, and how many more would be once what is leaving, then unallocated work,
/// then allocated work past its minimum runtime left them.
#[derive(Debug, Clone, Copy)]
struct Ladder {
    /// GPUs per node.
    capacity: u32,
    /// Nodes the smallest such job needs.
    needed: u32,
    /// The smallest needs an allocated job (unallocated work never preempts).
    allocated_needed: Option<u32>,
    /// Wholly free nodes, then cumulatively with leaving work, unallocated work and work past
    /// its minimum runtime gone.
    free: u32,
    stopping: u32,
    without_unallocated: u32,
    without_past_minimum: u32,
}

impl Ladder {
    /// The split's entry a wholly free node of this size is filed under.
    fn file<'a>(&self, s: &'a mut IdleUnderContention) -> &'a mut u128 {
        if self.free >= self.needed {
            return &mut s.waiting_job_fits_gpu_ms;
        }
        let Some(needed) = self.allocated_needed else {
            return &mut s.nothing_fits_gpu_ms;
        };
        if self.stopping >= needed {
            &mut s.victims_stopping_gpu_ms
        } else if self.without_unallocated >= needed {
            &mut s.fits_without_unallocated_gpu_ms
        } else if self.without_past_minimum >= needed {
            &mut s.fits_without_past_minimum_gpu_ms
        } else {
            &mut s.nothing_fits_gpu_ms
        }
    }
}

impl Holes {
    /// One [`Ladder`] per node size some multi-node job waits for, counted at `from` over the
    /// open nodes (empty, and nothing counted, when none waits: the common case).
    fn multi_node_ladders(&self, from: i64) -> Vec<Ladder> {
        let mut ladders: Vec<Ladder> = self
            .multi
            .iter()
            .filter_map(|(&capacity, by_nodes)| {
                Some(Ladder {
                    capacity,
                    needed: *by_nodes.keys().next()?,
                    allocated_needed: by_nodes.iter().find(|(_, c)| c.1 > 0).map(|(&k, _)| k),
                    free: 0,
                    stopping: 0,
                    without_unallocated: 0,
                    without_past_minimum: 0,
                })
            })
            .collect();
        if ladders.is_empty() {
            return ladders;
        }
        for n in self.nodes.iter().filter(|n| !n.closed() && n.pending == 0) {
            let Some(l) = ladders.iter_mut().find(|l| l.capacity == n.capacity) else {
                continue;
            };
            // The first rung at which everything on the node is gone.
            let (mut leaving, mut unallocated, mut past, mut protected) =
                (false, false, false, false);
            for h in &n.holders {
                if h.leaving {
                    leaving = true;
                } else if h.unallocated {
                    unallocated = true;
                } else if h.protected_until_ms <= from {
                    past = true;
                } else {
                    protected = true;
                }
            }
            if protected {
                continue;
            }
            l.without_past_minimum += 1;
            if past {
                continue;
            }
            l.without_unallocated += 1;
            if unallocated {
                continue;
            }
            l.stopping += 1;
            if !leaving {
                l.free += 1;
            }
        }
        ladders
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn shape(nodes: u32, gpus_per_node: u32) -> Shape {
        Shape {
            nodes,
            gpus_per_node,
        }
    }

    fn cluster() -> Holes {
        let mut h = Holes::default();
        h.set_node("n1", 8, false);
        h
    }

    #[test]
    fn a_hole_is_filed_by_what_would_have_to_leave_for_the_smallest_waiter() {
        // One 8-GPU node: an unallocated 2-GPU job, an allocated 2-GPU job past its minimum
        // runtime at minute 10, a protected 1-GPU job; 3 GPUs free.
        let mut h = cluster();
        h.start(0, 1, 2, true, 0);
        h.start(0, 2, 2, false, 10 * MIN);
        h.start(0, 3, 1, false, 100 * MIN);
        // Waiting: an allocated 5-GPU job. Unallocated work gone: 3 + 2 = 5 fits.
        h.queue(shape(1, 5), true, true);
        h.add(0, MIN);
        assert_eq!(h.split.fits_without_unallocated_gpu_ms, 3 * MIN as u128);
        // An allocated 7-GPU job instead: fits only once the allocated 2-GPU job past its
        // minimum runtime leaves too, and only from minute 10.
        h.queue(shape(1, 5), true, false);
        h.queue(shape(1, 7), true, true);
        h.add(MIN, 2 * MIN);
        assert_eq!(h.split.nothing_fits_gpu_ms, 3 * MIN as u128);
        h.add(10 * MIN, 11 * MIN);
        assert_eq!(h.split.fits_without_past_minimum_gpu_ms, 3 * MIN as u128);
        // The allocated job past its minimum runtime is ordered off: the 7-GPU job now needs
        // only the unallocated work gone besides.
        h.ordered_off(0, 2);
        h.add(11 * MIN, 12 * MIN);
        assert_eq!(h.split.fits_without_unallocated_gpu_ms, 6 * MIN as u128);
        // For a 5-GPU job, the hole waits on a preemption already under way, not on one the
        // scheduler could still order.
        h.queue(shape(1, 7), true, false);
        h.queue(shape(1, 5), true, true);
        h.add(12 * MIN, 13 * MIN);
        assert_eq!(h.split.victims_stopping_gpu_ms, 3 * MIN as u128);
        // A waiting unallocated 3-GPU job fits the hole as it is.
        h.queue(shape(1, 3), false, true);
        h.add(13 * MIN, 14 * MIN);
        assert_eq!(h.split.waiting_job_fits_gpu_ms, 3 * MIN as u128);
        assert_eq!(h.split.total(), 18 * MIN as u128);
    }

    #[test]
    fn unallocated_waiters_never_count_as_room_made_by_preemption() {
        // Only an unallocated 8-GPU job waits: unallocated work never preempts, so the hole
        // next to a 1-GPU unallocated job is not room preemption could make.
        let mut h = cluster();
        h.start(0, 1, 1, true, 0);
        h.queue(shape(1, 8), false, true);
        h.add(0, MIN);
        assert_eq!(h.split.nothing_fits_gpu_ms, 7 * MIN as u128);
        assert_eq!(h.split.fits_without_unallocated_gpu_ms, 0);
    }

    #[test]
    fn whole_free_nodes_count_for_multi_node_waiters_and_pending_gpus_for_the_launcher() {
        let mut h = cluster();
        h.set_node("n2", 8, false);
        h.set_node("n3", 8, false);
        h.queue(shape(2, 8), true, true);
        h.pending(1, 8, true);
        h.add(0, MIN);
        // n1 and n3 are wholly free and a 2 x 8 job waits; n2's GPUs await their start.
        assert_eq!(h.split.waiting_job_fits_gpu_ms, 16 * MIN as u128);
        assert_eq!(h.split.awaiting_start_gpu_ms, 8 * MIN as u128);
        // Started: n2 holds it, nothing idle there any more; n3 is cordoned.
        h.pending(1, 8, false);
        h.start(1, 9, 8, false, 100 * MIN);
        h.set_node("n3", 8, true);
        h.add(MIN, 2 * MIN);
        assert_eq!(h.split.total(), 32 * MIN as u128);
        // n1 alone is free: the 2 x 8 job cannot start there, protected work holds n2.
        assert_eq!(h.split.nothing_fits_gpu_ms, 8 * MIN as u128);
        h.stop(1, 9);
        h.add(2 * MIN, 3 * MIN);
        assert_eq!(h.split.waiting_job_fits_gpu_ms, 32 * MIN as u128);
    }

    #[test]
    fn a_free_node_short_of_the_nodes_a_multi_node_job_needs_is_filed_by_what_holds_the_others() {
        // Four nodes of 8; a 2 x 8 allocated job waits. n1 is free; n2..n4 hold protected
        // work until minute 10.
        let mut h = cluster();
        for (i, name) in ["n2", "n3", "n4"].iter().enumerate() {
            h.set_node(name, 8, false);
            h.start(i as u32 + 1, 10 + i as u32, 8, false, 10 * MIN);
        }
        h.queue(shape(2, 8), true, true);
        h.add(0, MIN);
        assert_eq!(h.split.nothing_fits_gpu_ms, 8 * MIN as u128);
        // Past their minimum runtime: the job fits once one of them leaves.
        h.add(10 * MIN, 11 * MIN);
        assert_eq!(h.split.fits_without_past_minimum_gpu_ms, 8 * MIN as u128);
        // n4's job is ordered off: it fits once that job stops.
        h.ordered_off(3, 12);
        h.add(11 * MIN, 12 * MIN);
        assert_eq!(h.split.victims_stopping_gpu_ms, 8 * MIN as u128);
        // Only an unallocated 2 x 8 job waits instead: it never preempts, so nothing fits.
        h.queue(shape(2, 8), true, false);
        h.queue(shape(2, 8), false, true);
        h.add(12 * MIN, 13 * MIN);
        assert_eq!(h.split.nothing_fits_gpu_ms, 16 * MIN as u128);
        // Three nodes, n2 and n3 running unallocated work, a 3 x 8 allocated job waiting: it
        // fits once that work leaves.
        let mut h = cluster();
        for (i, name) in ["n2", "n3"].iter().enumerate() {
            h.set_node(name, 8, false);
            h.start(i as u32 + 1, 10 + i as u32, 8, true, 0);
        }
        h.queue(shape(3, 8), true, true);
        h.add(0, MIN);
        assert_eq!(h.split.fits_without_unallocated_gpu_ms, 8 * MIN as u128);
        assert_eq!(h.split.total(), 8 * MIN as u128);
    }
}
