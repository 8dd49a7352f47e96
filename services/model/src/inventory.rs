//! A cluster's nodes, as folded from node events.
//!
//! Submission uses it to check that a job can ever fit; the decision service places jobs on it.

use std::collections::BTreeMap;

/// One node's standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// GPUs the node has.
    pub gpus: u32,
    /// Cordoned nodes take no new placements.
    pub cordoned: bool,
}

/// The nodes of one cluster, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Registered nodes by name (sorted, so iteration is deterministic).
    pub nodes: BTreeMap<String, Node>,
}

impl Inventory {
    /// Registers a node or changes its GPU count; keeps its cordon state.
    pub fn register(&mut self, name: &str, gpus: u32) {
        self.nodes
            .entry(name.to_owned())
            .and_modify(|n| n.gpus = gpus)
            .or_insert(Node {
                gpus,
                cordoned: false,
            });
    }

    /// Removes a node; unknown names are ignored (removal is idempotent).
    pub fn remove(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// Marks a node cordoned or not; unknown names are ignored.
    pub fn set_cordoned(&mut self, name: &str, cordoned: bool) {
        if let Some(n) = self.nodes.get_mut(name) {
            n.cordoned = cordoned;
        }
    }

    /// GPUs over every registered node, cordoned or not.
    pub fn total_gpus(&self) -> u64 {
        self.nodes.values().map(|n| u64::from(n.gpus)).sum()
    }

    /// The largest GPU count of any one node.
    pub fn largest_node(&self) -> u32 {
        self.nodes.values().map(|n| n.gpus).max().unwrap_or(0)
    }

    /// How many nodes have exactly `gpus` GPUs.
    pub fn nodes_with(&self, gpus: u32) -> usize {
        self.nodes.values().filter(|n| n.gpus == gpus).count()
    }
}
