//! Whether a cycle could place anything at all, answered without ranking or packing.
//!
//! Place in the flow: every placement a cycle makes ([`crate::domain::decide()`]) takes free
//! GPUs of an uncordoned node, where [`crate::domain::place`] puts a single-node job on a
//! node with enough free GPUs and a multi-node job on wholly free nodes of exactly its GPUs
//! per node. Ranking, reservations and maintenance windows only ever take nodes away. So
//! when no queued job's shape fits the free GPUs that way, the cycle places nothing, and a
//! caller that only wants placements (the simulator, between events) may skip it: in a full
//! cluster most cycles are such, and ranking and packing cost far more than this test, which
//! reads each node once and each distinct queued shape once.
//!
//! GPUs promised to a waiting job ([`crate::domain::promise`]) are free for that job alone:
//! [`DecisionState::free_room_at`] leaves them out, and
//! [`DecisionState::any_queued_shape_fits_at`] asks separately whether a promised job fits
//! with its own GPUs added back. Counting them free for every shape, as
//! [`DecisionState::free_room`] does, would only cost cycles that place nothing.
//!
//! The same count of queued shapes tells the preemption service whether GPUs a debug job
//! leaves over on a node would be taken up ([`DecisionState::queued_single_node_fill`]).

use fairshare_model::shape::Shape;

use super::state::{DecisionState, shape_key};

/// The free GPUs of the uncordoned nodes, reduced to what answers "could a job of this shape
/// fit": the most on one node, and the wholly free nodes by size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreeRoom {
    /// The most free GPUs on one uncordoned node.
    most_free: u32,
    /// Wholly free uncordoned nodes as `(GPUs, how many)` by size: a cluster has a few node
    /// sizes.
    whole: Vec<(u32, u32)>,
}

impl FreeRoom {
    /// Whether any uncordoned node has a free GPU.
    pub fn any_free(&self) -> bool {
        self.most_free > 0
    }

    /// Whether a job of `nodes x gpus_per_node` fits: a single-node job one node with that
    /// many free GPUs, a multi-node job enough wholly free nodes of exactly its GPUs per node.
    fn fits(&self, nodes: u32, gpus_per_node: u32) -> bool {
        if gpus_per_node == 0 {
            false
        } else if nodes <= 1 {
            gpus_per_node <= self.most_free
        } else {
            self.whole
                .iter()
                .any(|&(gpus, count)| gpus == gpus_per_node && count >= nodes)
        }
    }
}

impl DecisionState {
    /// The free GPUs of the uncordoned nodes (one read of every node), counting GPUs promised
    /// to a waiting job ([`crate::domain::promise`]) as free.
    pub fn free_room(&self) -> FreeRoom {
        // Tallied by the node index as loads and registrations change, not read node by node.
        let (most_free, whole) = self.registered.free_room();
        let room = FreeRoom { most_free, whole };
        debug_assert_eq!(room, self.room_without(&[]), "the tallied free room");
        room
    }

    /// The free GPUs of the uncordoned nodes at `now`, without the GPUs promised to waiting
    /// jobs then: what any job but those could get. Pair it with
    /// [`Self::any_queued_shape_fits_at`], which also asks whether a promised job fits.
    pub fn free_room_at(&self, now: i64) -> FreeRoom {
        let withheld = self.withheld_by_node(now);
        self.room_without(&withheld)
    }

    /// [`Self::free_room_at`] for a caller that holds `free`, [`Self::free_room`] of this
    /// same state: with no promise in force at `now` the two are the same, and the nodes are
    /// not read again (the simulator asks both before every cycle).
    pub fn free_room_at_given(&self, now: i64, free: FreeRoom) -> FreeRoom {
        let withheld = self.withheld_by_node(now);
        if withheld.is_empty() {
            debug_assert_eq!(free, self.free_room(), "`free` is this state's free room");
            free
        } else {
            self.room_without(&withheld)
        }
    }

    /// The room of the uncordoned nodes, less `withheld` GPUs per node (sorted by name).
    fn room_without(&self, withheld: &[(&str, u32)]) -> FreeRoom {
        let mut withheld = withheld.iter().peekable();
        let mut room = FreeRoom::default();
        for row in self.nodes_with_loads() {
            while withheld.next_if(|w| w.0 < row.name).is_some() {}
            let held = withheld.next_if(|w| w.0 == row.name).map_or(0, |w| w.1);
            if row.node.cordoned {
                continue;
            }
            let free = row
                .node
                .gpus
                .saturating_sub(row.used())
                .saturating_sub(held);
            room.most_free = room.most_free.max(free);
            if free > 0 && free == row.node.gpus {
                match room.whole.iter_mut().find(|(gpus, _)| *gpus == free) {
                    Some((_, count)) => *count += 1,
                    None => room.whole.push((free, 1)),
                }
            }
        }
        room.whole.sort_unstable();
        room
    }

    /// How many of `gpus` GPUs on one node queued single-node jobs would fill, allocated and
    /// unallocated work alike, with one job of shape `besides` (the waiter asking) left out:
    /// the largest jobs that still fit first, as many of each size as fit. An estimate of
    /// what the next cycles could put there (it reads neither rank nor reservations), from
    /// the count of queued shapes: a few entries, not the queue.
    pub fn queued_single_node_fill(&self, gpus: u32, besides: Shape) -> u32 {
        if gpus == 0 {
            // Nothing to fill (and an empty key range would be a backwards one).
            return 0;
        }
        let mut left = gpus;
        for (&key, &count) in self.queued_shapes.range((1, 1)..=(1, gpus)).rev() {
            let size = key.1;
            if size > left {
                continue;
            }
            let others = count.saturating_sub(usize::from(key == shape_key(besides)));
            let taken = u32::try_from(others).unwrap_or(u32::MAX).min(left / size);
            left -= taken * size;
            if left == 0 {
                break;
            }
        }
        gpus - left
    }

    /// Whether some queued job's shape fits `room` (see [`FreeRoom`]). `false` means a cycle
    /// now places nothing.
    pub fn any_queued_shape_fits_in(&self, room: &FreeRoom) -> bool {
        self.queued_shapes
            .keys()
            .any(|&(nodes, gpus_per_node)| room.fits(nodes, gpus_per_node))
    }

    /// Whether a cycle at `now` could place anything, given `room` from
    /// [`Self::free_room_at`]: some queued shape fits it, or some job with a promise in force
    /// fits it with its promised GPUs added back. `false` means a cycle now places nothing.
    pub fn any_queued_shape_fits_at(&self, room: &FreeRoom, now: i64) -> bool {
        if self.any_queued_shape_fits_in(room) {
            return true;
        }
        self.promises_at(now).any(|(job, promise)| {
            let Some(shape) = self.job(job).map(|j| j.request.shape) else {
                return false;
            };
            // Its promised nodes, each with the free GPUs it would see there.
            let mut whole = 0;
            for (node, _) in &promise.nodes {
                let Some(n) = self.inventory.nodes().get(&**node) else {
                    continue;
                };
                if n.cordoned {
                    continue;
                }
                // All the node's unheld GPUs, other jobs' promised ones too: an upper bound,
                // which is all a skip test needs (at worst a cycle places nothing).
                let free = n.gpus.saturating_sub(self.load(node).map_or(0, |l| l.used));
                if shape.nodes <= 1 && free >= shape.gpus_per_node {
                    return true;
                }
                if free == n.gpus && n.gpus == shape.gpus_per_node {
                    whole += 1;
                }
            }
            shape.nodes > 1
                && room
                    .whole
                    .iter()
                    .filter(|(g, _)| *g == shape.gpus_per_node)
                    .map(|(_, c)| *c)
                    .sum::<u32>()
                    .saturating_add(whole)
                    >= shape.nodes
        })
    }

    /// [`Self::any_queued_shape_fits_in`] the state's own [`Self::free_room`].
    pub fn any_queued_shape_fits(&self) -> bool {
        !self.queued_shapes.is_empty() && self.any_queued_shape_fits_in(&self.free_room())
    }

    /// Whether some queued job a cycle could place (its allocation is a leaf of the budget
    /// tree in force) has a shape that fits the free GPUs. Unlike
    /// [`Self::any_queued_shape_fits`] it is not fooled by a job left queued under an
    /// allocation removed from the tree, which no cycle places; it walks the queues only when
    /// the cheap test says yes.
    pub fn any_placeable_shape_fits(&self) -> bool {
        let Some(tree) = &self.tree else {
            return false;
        };
        let room = self.free_room();
        if self.queued_shapes.is_empty() || !self.any_queued_shape_fits_in(&room) {
            return false;
        }
        self.queues
            .iter()
            .filter(|(allocation, _)| tree.allocation(allocation).is_some())
            .flat_map(|(_, q)| q.allocated.iter().chain(q.unallocated.iter()))
            .any(|(_, r)| room.fits(r.shape.nodes, r.shape.gpus_per_node))
    }
}
