//! Where a job fits: the cycle's view of free GPUs per node, best-fit packing, whole nodes for
//! multi-node jobs.
//!
//! Place in the flow: [`crate::domain::decide()`] builds one `Pool` per cycle from the folded
//! state (registered nodes, GPUs held, cordons, maintenance windows), asks it for nodes for
//! each job in rank order (`Pool::find`) and takes the GPUs it is given (`Pool::take`), so
//! later jobs see what earlier ones took. The pool also remembers the free GPUs at the start of
//! the cycle so a waiting job can be told why it waits (`Pool::fits_at_start`).
//!
//! Rules:
//! - A node takes new work only if it is registered and not cordoned, and if no maintenance
//!   window is in progress or closes the node before the job's protection ends
//!   (`now + min_runtime`). A window at `T` closes its node at `T - 30 s`, when the preemption
//!   service starts clearing it (its default grace, [`Window::closes_at`]), so it accepts only
//!   work whose protection ends by then, before `T` as the SPEC asks: the clearing never cuts a
//!   protection. Unallocated work (minimum runtime 0) is never kept off a node by a future
//!   window before it closes the node: it is preemptible.
//! - Single-node jobs go where they fit best: the node with the fewest free GPUs that still
//!   holds them; on equal free GPUs a node already in use wins over a wholly free one, then the
//!   lowest node name.
//! - Multi-node jobs take whole free nodes of exactly their GPUs per node (nothing shares them),
//!   lowest names first.
//! - GPUs promised to a waiting job ([`crate::domain::promise`]) are not free for anyone
//!   else: the cycle hands them to that job alone while it considers it
//!   (`Pool::release_promise`), and withholds them again if it does not fit
//!   (`Pool::restore_promise`).
//!
//! How fragmentation is limited: best fit opens a wholly free node for a small job only when no
//! node already in use has room for it, and among equally good nodes it packs onto the
//! lowest-named ones, so partly used nodes stay few and wholly free nodes stay whole for 8-GPU
//! and multi-node jobs. It does not move running jobs (no defragmentation by migration); where
//! packing alone is not enough, the large job's reservation (see [`crate::domain::reserve`])
//! keeps the GPUs it needs from being taken by long work as they free up.
//!
//! Cost: free nodes live in ordered sets keyed by `(free GPUs, wholly free, index)`, so best
//! fit is one range lookup (O(log nodes)) and a take is a remove and an insert. Nodes with an
//! upcoming maintenance window are grouped by the window's start (one set per distinct start,
//! and windows come in batches), so a lookup costs O(distinct starts x log nodes), never a scan
//! of the nodes.

use std::collections::{BTreeMap, BTreeSet};

use fairshare_model::shape::Shape;

use super::nodes::NodeRow;
use super::reserve::Guard;
use super::state::{DecisionState, NodeLoad, Window};

/// Whether a node takes new work, as of the cycle's `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Takes any work.
    Open,
    /// Takes work whose protection ends at or before this time (the next maintenance start).
    Until(i64),
    /// Cordoned: takes nothing.
    Cordoned,
    /// A maintenance window is in progress, or the node is being cleared for one
    /// ([`Window::closes_at`]): takes nothing.
    InMaintenance,
}

/// One node as the cycle sees it.
#[derive(Debug, Clone)]
pub(crate) struct PoolNode<'s> {
    pub name: &'s str,
    pub capacity: u32,
    pub free: u32,
    pub access: Access,
    pub windows: &'s [Window],
    pub load: Option<&'s NodeLoad>,
    /// GPUs promised to waiting jobs and withheld from the others (not counted in `free`).
    pub withheld: u32,
}

impl PoolNode<'_> {
    fn whole(&self) -> bool {
        self.free == self.capacity
    }

    /// GPUs the job under consideration could ever get here: all but those promised to others.
    pub fn usable(&self) -> u32 {
        self.capacity.saturating_sub(self.withheld)
    }
}

/// Free GPUs of a set of nodes, reduced to what answers "could a job of this shape fit".
#[derive(Debug, Clone, Default)]
pub(crate) struct FitSummary {
    max_free: u32,
    /// Wholly free nodes by GPU count, sorted by GPU count (a cluster has a few node sizes,
    /// so a short array beats a map here).
    whole: Vec<(u32, u32)>,
}

impl FitSummary {
    fn add(&mut self, capacity: u32, free: u32) {
        self.max_free = self.max_free.max(free);
        if free == capacity && capacity > 0 {
            match self.whole.binary_search_by_key(&capacity, |&(g, _)| g) {
                Ok(i) => self.whole[i].1 += 1,
                Err(i) => self.whole.insert(i, (capacity, 1)),
            }
        }
    }

    fn whole_nodes(&self, gpus_per_node: u32) -> u32 {
        self.whole
            .binary_search_by_key(&gpus_per_node, |&(g, _)| g)
            .map_or(0, |i| self.whole[i].1)
    }

    /// Whether a job of `shape` fits these free GPUs.
    pub fn fits(&self, shape: Shape) -> bool {
        if shape.nodes <= 1 {
            shape.gpus_per_node <= self.max_free
        } else {
            self.whole_nodes(shape.gpus_per_node) >= shape.nodes
        }
    }

    /// The most free GPUs on one node.
    pub fn max_free(&self) -> u32 {
        self.max_free
    }
}

impl Pool<'_> {
    /// The most free GPUs at the cycle's start on one node that takes work now: open, or open
    /// until a maintenance window ahead (free, if not for long), not cordoned or in a window.
    pub(crate) fn largest_free_taking_work(&self) -> u32 {
        self.start_restricted
            .values()
            .map(FitSummary::max_free)
            .fold(self.start_open.max_free(), u32::max)
    }
}

/// What [`Pool::find`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// These `(node index, GPUs)`.
    Nodes(Vec<(u32, u32)>),
    /// It would fit, but only on GPUs reserved for a higher-ranked job.
    Blocked,
    /// It does not fit the free GPUs.
    Nowhere,
}

/// The cycle's free GPUs.
#[derive(Debug, Clone)]
pub(crate) struct Pool<'s> {
    pub nodes: Vec<PoolNode<'s>>,
    /// `(free, wholly free, index)` of open nodes with free GPUs.
    open: BTreeSet<(u32, bool, u32)>,
    /// The same for nodes with maintenance ahead, by the latest protection end they accept.
    restricted: BTreeMap<i64, BTreeSet<(u32, bool, u32)>>,
    /// Start-of-cycle free GPUs of those nodes, by the same key.
    start_restricted: BTreeMap<i64, FitSummary>,
    /// Free GPUs on nodes that take work.
    free_total: u64,
    /// `(node index, GPUs, reclaim time)` taken this cycle, for reservations.
    pub placed: Vec<(u32, u32, i64)>,
    /// Start-of-cycle free GPUs on open nodes.
    pub start_open: FitSummary,
    /// Start-of-cycle free GPUs on every node that is not cordoned, ignoring maintenance.
    pub start_uncordoned: FitSummary,
    /// Start-of-cycle free GPUs on every node, ignoring cordons and maintenance.
    pub start_all: FitSummary,
    /// Capacity (not free GPUs) of every node that is not cordoned: what a reservation can
    /// ever get.
    pub capacity_uncordoned: FitSummary,
    /// Per job with a promise in force, the `(node index, GPUs)` withheld for it, by job id.
    promised: Vec<(&'s str, Vec<(u32, u32)>)>,
    /// Start-of-cycle free GPUs of the nodes that take work now, counting GPUs promised to
    /// waiting jobs as free: empty when nothing is promised.
    pub start_unpromised: FitSummary,
    /// What [`Pool::release_promise`] offered the job under consideration, sorted by node
    /// index: a reservation's guard does not count these against it (they were never the
    /// reservation's to plan on).
    released: Vec<(u32, u32)>,
}

/// A node's access at `now`: a window counts from when it closes the node (a little before its
/// start, [`Window::closes_at`]) until its end.
fn access(cordoned: bool, windows: &[Window], now: i64) -> Access {
    if cordoned {
        return Access::Cordoned;
    }
    let mut next_close: Option<i64> = None;
    for w in windows {
        if w.end_ms <= now {
            continue;
        }
        let closes = w.closes_at();
        if closes <= now {
            return Access::InMaintenance;
        }
        next_close = Some(next_close.map_or(closes, |c| c.min(closes)));
    }
    next_close.map_or(Access::Open, Access::Until)
}

fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

impl<'s> Pool<'s> {
    /// The free GPUs of `state`'s registered nodes at `now`, in node-name order.
    pub fn new(state: &'s DecisionState, now: i64) -> Pool<'s> {
        let mut pool = Pool {
            nodes: Vec::with_capacity(state.inventory.nodes().len()),
            open: BTreeSet::new(),
            restricted: BTreeMap::new(),
            start_restricted: BTreeMap::new(),
            free_total: 0,
            placed: Vec::new(),
            start_open: FitSummary::default(),
            start_uncordoned: FitSummary::default(),
            start_all: FitSummary::default(),
            capacity_uncordoned: FitSummary::default(),
            promised: Vec::new(),
            start_unpromised: FitSummary::default(),
            released: Vec::new(),
        };
        // Both in node-name order: a merge, and nothing to merge while nothing is promised.
        let withheld_by_node = state.withheld_by_node(now);
        let any_withheld = !withheld_by_node.is_empty();
        let mut withheld_by_node = withheld_by_node.iter().peekable();
        // Built at once from a list rather than node by node: on a large, mostly idle cluster
        // every node has free GPUs, and 100,000 inserts into the set were most of a cycle.
        let mut open = Vec::new();
        for row in state.nodes_with_loads() {
            let NodeRow {
                name,
                node,
                load,
                windows,
            } = row;
            let unheld = node.gpus.saturating_sub(row.used());
            while withheld_by_node.next_if(|w| w.0 < name).is_some() {}
            let withheld = withheld_by_node
                .next_if(|w| w.0 == name)
                .map_or(0, |&(_, g)| g.min(unheld));
            let free = unheld - withheld;
            let access = access(node.cordoned, windows, now);
            let idx = index(pool.nodes.len());
            match access {
                Access::Open => {
                    pool.start_open.add(node.gpus, free);
                    if free > 0 {
                        open.push((free, free == node.gpus, idx));
                    }
                    pool.free_total += u64::from(free);
                }
                Access::Until(until) => {
                    pool.start_restricted
                        .entry(until)
                        .or_default()
                        .add(node.gpus, free);
                    if free > 0 {
                        pool.restricted.entry(until).or_default().insert((
                            free,
                            free == node.gpus,
                            idx,
                        ));
                    }
                    pool.free_total += u64::from(free);
                }
                Access::Cordoned | Access::InMaintenance => {}
            }
            if any_withheld && matches!(access, Access::Open | Access::Until(_)) {
                pool.start_unpromised.add(node.gpus, unheld);
            }
            if access != Access::Cordoned {
                pool.start_uncordoned.add(node.gpus, free);
                pool.capacity_uncordoned.add(node.gpus, node.gpus);
            }
            pool.start_all.add(node.gpus, free);
            pool.nodes.push(PoolNode {
                name,
                capacity: node.gpus,
                free,
                access,
                windows,
                load,
                withheld,
            });
        }
        pool.open = open.into_iter().collect();
        if any_withheld {
            pool.promised = promised_by_job(state, now, &pool.nodes);
        }
        pool
    }

    /// Offers the GPUs promised to `job_id` as free, for as long as the cycle considers that
    /// job. True if it had any.
    pub fn release_promise(&mut self, job_id: &str) -> bool {
        let Some(i) = self.promise_index(job_id) else {
            return false;
        };
        for k in 0..self.promised[i].1.len() {
            let (idx, gpus) = self.promised[i].1[k];
            let node = &mut self.nodes[idx as usize];
            node.withheld = node.withheld.saturating_sub(gpus);
            let free = node.free.saturating_add(gpus);
            self.set_free(idx, free);
        }
        self.released.clone_from(&self.promised[i].1);
        true
    }

    /// The job under consideration is done with what [`Self::release_promise`] offered: it
    /// was placed, so the promise is spent.
    pub fn spend_promise(&mut self) {
        self.released.clear();
    }

    /// GPUs of node `idx` offered from a promise to the job under consideration.
    pub fn released_on(&self, idx: u32) -> u32 {
        if self.released.is_empty() {
            return 0;
        }
        self.released
            .binary_search_by_key(&idx, |&(i, _)| i)
            .map_or(0, |k| self.released[k].1)
    }

    /// Withholds again what [`Self::release_promise`] offered, when the job did not take it.
    pub fn restore_promise(&mut self, job_id: &str) {
        self.released.clear();
        let Some(i) = self.promise_index(job_id) else {
            return;
        };
        for k in 0..self.promised[i].1.len() {
            let (idx, gpus) = self.promised[i].1[k];
            let node = &mut self.nodes[idx as usize];
            let back = gpus.min(node.free);
            node.withheld = node.withheld.saturating_add(back);
            let free = node.free - back;
            self.set_free(idx, free);
        }
    }

    /// Whether no job can be placed any more this cycle: no free GPU on a node that takes
    /// work, and no promise that a job could still be offered.
    pub fn exhausted(&self) -> bool {
        self.free_total == 0 && self.promised.is_empty()
    }

    /// Whether GPUs are promised to `job_id` in this cycle.
    pub fn has_promise(&self, job_id: &str) -> bool {
        self.promise_index(job_id).is_some()
    }

    fn promise_index(&self, job_id: &str) -> Option<usize> {
        if self.promised.is_empty() {
            return None;
        }
        self.promised
            .binary_search_by(|(j, _)| (*j).cmp(job_id))
            .ok()
    }

    /// Sets node `idx`'s free GPUs, keeping the ordered sets and the total in step.
    fn set_free(&mut self, idx: u32, free: u32) {
        let node = &mut self.nodes[idx as usize];
        let before = (node.free, node.whole(), idx);
        node.free = free;
        let after = (node.free, node.whole(), idx);
        let set = match node.access {
            Access::Open => Some(&mut self.open),
            Access::Until(until) => Some(self.restricted.entry(until).or_default()),
            Access::Cordoned | Access::InMaintenance => None,
        };
        if let Some(set) = set {
            set.remove(&before);
            if after.0 > 0 {
                set.insert(after);
            }
            self.free_total = self
                .free_total
                .saturating_sub(u64::from(before.0))
                .saturating_add(u64::from(after.0));
        }
    }

    /// Nodes for a job of `shape` protected until `protected_until`, respecting `guard`;
    /// `allocation` is the job's if it is allocated work, `None` if unallocated.
    pub fn find(
        &self,
        shape: Shape,
        protected_until: i64,
        guard: Option<&Guard>,
        allocation: Option<&str>,
    ) -> Found {
        if shape.total_gpus() > self.free_total || shape.gpus_per_node == 0 {
            return Found::Nowhere;
        }
        // GPUs promised to this job were never the reservation's to plan on.
        let allows = |idx: u32, gpus: u32| {
            guard.is_none_or(|g| {
                g.allows(
                    idx,
                    gpus.saturating_sub(self.released_on(idx)),
                    protected_until,
                    allocation,
                )
            })
        };
        if shape.nodes <= 1 {
            // A node with room that the guard refused: the job is blocked by the reservation.
            let mut blocked = false;
            let g = shape.gpus_per_node;
            let mut best: Option<(u32, bool, u32)> = None;
            // The largest key is the most free GPUs on an open node: when even that is too
            // few, skip the range search (a busy cycle asks this for every waiting job).
            let open = if self.open.last().is_some_and(|&(free, _, _)| free >= g) {
                Some(self.open.range((g, false, 0)..))
            } else {
                None
            };
            for &key in open.into_iter().flatten() {
                if allows(key.2, g) {
                    best = Some(key);
                    break;
                }
                blocked = true;
            }
            // Most clusters have no maintenance ahead: then there is no range to walk.
            let restricted = if self.restricted.is_empty() {
                None
            } else {
                Some(self.restricted.range(protected_until..))
            };
            for (_, set) in restricted.into_iter().flatten() {
                for &key in set.range((g, false, 0)..) {
                    if best.is_some_and(|b| b <= key) {
                        break;
                    }
                    if allows(key.2, g) {
                        best = Some(key);
                        break;
                    }
                    blocked = true;
                }
            }
            return match best {
                Some((_, _, idx)) => Found::Nodes(vec![(idx, g)]),
                None if blocked => Found::Blocked,
                None => Found::Nowhere,
            };
        }
        let (k, gpn) = (shape.nodes as usize, shape.gpus_per_node);
        // Allocated only once a node is found: most multi-node jobs of a busy cycle find none.
        let mut chosen: Vec<u32> = Vec::new();
        // Wholly free nodes of this size come in index order within each set: the first k
        // allowed ones of every set together contain the k lowest overall.
        let restricted = if self.restricted.is_empty() {
            None
        } else {
            Some(self.restricted.range(protected_until..))
        };
        let sets =
            std::iter::once(&self.open).chain(restricted.into_iter().flatten().map(|(_, s)| s));
        let mut refused = 0usize;
        for set in sets {
            let mut taken = 0;
            for &(_, _, idx) in set.range((gpn, true, 0)..=(gpn, true, u32::MAX)) {
                if taken == k {
                    break;
                }
                if allows(idx, gpn) {
                    chosen.push(idx);
                    taken += 1;
                } else {
                    refused += 1;
                }
            }
        }
        if chosen.len() >= k {
            chosen.sort_unstable();
            chosen.truncate(k);
            Found::Nodes(chosen.into_iter().map(|i| (i, gpn)).collect())
        } else if chosen.len() + refused >= k {
            // Only if the nodes the guard refused would have made up the job: otherwise it
            // does not fit whatever the reservation holds.
            Found::Blocked
        } else {
            Found::Nowhere
        }
    }

    /// Takes `gpus` on node `idx` for work reclaimable at `reclaim_ms`.
    pub fn take(&mut self, idx: u32, gpus: u32, reclaim_ms: i64) {
        let free = self.nodes[idx as usize].free.saturating_sub(gpus);
        self.set_free(idx, free);
        self.placed.push((idx, gpus, reclaim_ms));
    }

    /// Whether a job of `shape` protected until `protected_until` would have fitted the free
    /// GPUs of the nodes that take it, as they were at the start of the cycle.
    pub fn fits_at_start(&self, shape: Shape, protected_until: i64) -> bool {
        if self.start_open.fits(shape) {
            return true;
        }
        if self.start_restricted.is_empty() {
            // No maintenance ahead: the open nodes were all there was.
            return false;
        }
        let mut whole = self.start_open.whole_nodes(shape.gpus_per_node);
        for summary in self
            .start_restricted
            .range(protected_until..)
            .map(|(_, s)| s)
        {
            if shape.nodes <= 1 {
                if summary.fits(shape) {
                    return true;
                }
            } else {
                whole += summary.whole_nodes(shape.gpus_per_node);
            }
        }
        shape.nodes > 1 && whole >= shape.nodes
    }
}

/// Per job with a promise in force at `now`, the `(node index, GPUs)` withheld for it, by job
/// id: each node's withheld GPUs shared out as [`DecisionState::promise_shares`] does.
fn promised_by_job<'s>(
    state: &'s DecisionState,
    now: i64,
    nodes: &[PoolNode<'_>],
) -> Vec<(&'s str, Vec<(u32, u32)>)> {
    let mut withheld: Vec<u32> = nodes.iter().map(|n| n.withheld).collect();
    let position = |name: &str| nodes.binary_search_by(|n| n.name.cmp(name)).ok();
    state
        .promise_shares(now, &mut withheld, position)
        .into_iter()
        .map(|(job, parts)| {
            let parts = parts.into_iter().map(|(i, g)| (index(i), g)).collect();
            (job, parts)
        })
        .collect()
}
