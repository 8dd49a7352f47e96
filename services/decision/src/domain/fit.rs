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

use super::state::DecisionState;

/// The free GPUs of the uncordoned nodes, reduced to what answers "could a job of this shape
/// fit": the most on one node, and the wholly free nodes by size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreeRoom {
    /// The most free GPUs on one uncordoned node.
    most_free: u32,
    /// Wholly free uncordoned nodes as `(GPUs, how many)`: a cluster has a few node sizes.
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
    /// The free GPUs of the uncordoned nodes (one read of every node).
    pub fn free_room(&self) -> FreeRoom {
        let mut room = FreeRoom::default();
        for row in self.nodes_with_loads() {
            if row.node.cordoned {
                continue;
            }
            let free = row.node.gpus.saturating_sub(row.used());
            room.most_free = room.most_free.max(free);
            if free > 0 && free == row.node.gpus {
                match room.whole.iter_mut().find(|(gpus, _)| *gpus == free) {
                    Some((_, count)) => *count += 1,
                    None => room.whole.push((free, 1)),
                }
            }
        }
        room
    }

    /// Whether some queued job's shape fits `room` (see [`FreeRoom`]). `false` means a cycle
    /// now places nothing.
    pub fn any_queued_shape_fits_in(&self, room: &FreeRoom) -> bool {
        self.queued_shapes
            .keys()
            .any(|&(nodes, gpus_per_node)| room.fits(nodes, gpus_per_node))
    }

    /// [`Self::any_queued_shape_fits_in`] the state's own [`Self::free_room`].
    pub fn any_queued_shape_fits(&self) -> bool {
        !self.queued_shapes.is_empty() && self.any_queued_shape_fits_in(&self.free_room())
    }
}
