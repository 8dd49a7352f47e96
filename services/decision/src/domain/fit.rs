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

impl DecisionState {
    /// Whether some queued job's shape fits the free GPUs of the uncordoned nodes: a
    /// single-node job a node with that many free GPUs, a multi-node job enough wholly free
    /// nodes of exactly its GPUs per node. `false` means a cycle now places nothing.
    pub fn any_queued_shape_fits(&self) -> bool {
        if self.queued_shapes.is_empty() {
            return false;
        }
        let mut most_free = 0u32;
        // Wholly free nodes by GPU count: a cluster has a few node sizes.
        let mut whole: Vec<(u32, u32)> = Vec::new();
        for row in self.nodes_with_loads() {
            if row.node.cordoned {
                continue;
            }
            let free = row.node.gpus.saturating_sub(row.used());
            most_free = most_free.max(free);
            if free > 0 && free == row.node.gpus {
                match whole.iter_mut().find(|(gpus, _)| *gpus == free) {
                    Some((_, count)) => *count += 1,
                    None => whole.push((free, 1)),
                }
            }
        }
        self.queued_shapes.keys().any(|&(nodes, gpus_per_node)| {
            if gpus_per_node == 0 {
                false
            } else if nodes <= 1 {
                gpus_per_node <= most_free
            } else {
                whole
                    .iter()
                    .any(|&(gpus, count)| gpus == gpus_per_node && count >= nodes)
            }
        })
    }
}
