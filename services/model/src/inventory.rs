//! A cluster's nodes, as folded from node events.
//!
//! Submission uses it to check that a job can ever fit; the decision service places jobs on it.

use std::collections::BTreeMap;

use crate::shape::Shape;

/// One node's standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// GPUs the node has.
    pub gpus: u32,
    /// Cordoned nodes take no new placements.
    pub cordoned: bool,
}

/// The nodes of one cluster, by name.
///
/// The submission checks ask for the total, the largest node and how many nodes have a given
/// size with every submission: those are kept as the nodes change, not counted over every
/// node each time (a 100,000-node cluster made each check walk the inventory three times).
/// So the nodes are changed only through these methods, and read through [`Inventory::nodes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Registered nodes by name (sorted, so iteration is deterministic).
    nodes: BTreeMap<String, Node>,
    /// How many registered nodes have each GPU count (no zero counts kept).
    by_size: BTreeMap<u32, usize>,
    /// GPUs over every registered node.
    total_gpus: u64,
}

impl Inventory {
    /// An inventory of `nodes` (a stored one, read back).
    pub fn from_nodes(nodes: impl IntoIterator<Item = (String, Node)>) -> Inventory {
        let mut inventory = Inventory::default();
        for (name, node) in nodes {
            inventory.count(node.gpus, true);
            if let Some(old) = inventory.nodes.insert(name, node) {
                inventory.count(old.gpus, false);
            }
        }
        inventory
    }

    /// Registered nodes by name.
    pub fn nodes(&self) -> &BTreeMap<String, Node> {
        &self.nodes
    }

    /// Registers a node or changes its GPU count; keeps its cordon state.
    pub fn register(&mut self, name: &str, gpus: u32) {
        let old = match self.nodes.get_mut(name) {
            Some(n) => Some(std::mem::replace(&mut n.gpus, gpus)),
            None => {
                self.nodes.insert(
                    name.to_owned(),
                    Node {
                        gpus,
                        cordoned: false,
                    },
                );
                None
            }
        };
        if let Some(old) = old {
            self.count(old, false);
        }
        self.count(gpus, true);
    }

    /// Removes a node; unknown names are ignored (removal is idempotent).
    pub fn remove(&mut self, name: &str) {
        if let Some(old) = self.nodes.remove(name) {
            self.count(old.gpus, false);
        }
    }

    /// Marks a node cordoned or not; unknown names are ignored.
    pub fn set_cordoned(&mut self, name: &str, cordoned: bool) {
        if let Some(n) = self.nodes.get_mut(name) {
            n.cordoned = cordoned;
        }
    }

    /// GPUs over every registered node, cordoned or not.
    pub fn total_gpus(&self) -> u64 {
        self.total_gpus
    }

    /// The largest GPU count of any one node.
    pub fn largest_node(&self) -> u32 {
        self.by_size.keys().next_back().copied().unwrap_or(0)
    }

    /// How many nodes have exactly `gpus` GPUs.
    pub fn nodes_with(&self, gpus: u32) -> usize {
        self.by_size.get(&gpus).copied().unwrap_or(0)
    }

    /// Whether the registered nodes, cordoned or not, could ever hold a job of `shape` were they
    /// all empty: a single-node job needs a node of at least its GPUs, a multi-node job whole
    /// nodes of exactly its GPUs per node. False once nodes it was submitted against are
    /// removed or registered again with fewer GPUs.
    pub fn could_hold(&self, shape: Shape) -> bool {
        if shape.nodes <= 1 {
            shape.gpus_per_node <= self.largest_node()
        } else {
            self.nodes_with(shape.gpus_per_node) >= shape.nodes as usize
        }
    }

    /// Counts a node of `gpus` GPUs in (`added`) or out of the sizes and the total.
    fn count(&mut self, gpus: u32, added: bool) {
        if added {
            *self.by_size.entry(gpus).or_insert(0) += 1;
            self.total_gpus = self.total_gpus.saturating_add(u64::from(gpus));
        } else {
            if let Some(n) = self.by_size.get_mut(&gpus) {
                *n -= 1;
                if *n == 0 {
                    self.by_size.remove(&gpus);
                }
            }
            self.total_gpus = self.total_gpus.saturating_sub(u64::from(gpus));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Inventory, Node};

    /// What the kept counts must equal: a count over every node.
    fn counted(inv: &Inventory) -> (u64, u32, Vec<(u32, usize)>) {
        let nodes = inv.nodes();
        let total = nodes.values().map(|n| u64::from(n.gpus)).sum();
        let largest = nodes.values().map(|n| n.gpus).max().unwrap_or(0);
        let mut sizes: Vec<u32> = nodes.values().map(|n| n.gpus).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let by_size = sizes
            .into_iter()
            .map(|g| (g, nodes.values().filter(|n| n.gpus == g).count()))
            .collect();
        (total, largest, by_size)
    }

    fn kept(inv: &Inventory) -> (u64, u32, Vec<(u32, usize)>) {
        let sizes: Vec<u32> = inv.nodes().values().map(|n| n.gpus).collect();
        let mut by_size: Vec<(u32, usize)> =
            sizes.iter().map(|&g| (g, inv.nodes_with(g))).collect();
        by_size.sort_unstable();
        by_size.dedup();
        (inv.total_gpus(), inv.largest_node(), by_size)
    }

    #[test]
    fn the_kept_counts_follow_every_change() {
        let mut inv = Inventory::default();
        assert_eq!(kept(&inv), (0, 0, vec![]));
        let steps: [(&str, Option<u32>); 10] = [
            ("a", Some(8)),
            ("b", Some(8)),
            ("c", Some(4)),
            ("b", Some(16)), // re-registered larger
            ("a", None),
            ("a", None), // removed twice: nothing more
            ("d", Some(16)),
            ("b", None), // the largest size keeps its other node
            ("zero", Some(0)),
            ("d", Some(4)),
        ];
        for (name, gpus) in steps {
            match gpus {
                Some(g) => inv.register(name, g),
                None => inv.remove(name),
            }
            assert_eq!(kept(&inv), counted(&inv), "after {name} {gpus:?}");
            assert_eq!(
                inv,
                Inventory::from_nodes(inv.nodes().clone()),
                "after {name}"
            );
        }
        inv.set_cordoned("c", true);
        assert_eq!(kept(&inv), (8, 4, vec![(0, 1), (4, 2)]));
        assert_eq!(inv.nodes_with(16), 0);
        // Read back from a listing that names a node twice, the later entry stands.
        let twice = Inventory::from_nodes([
            (
                "x".to_owned(),
                Node {
                    gpus: 8,
                    cordoned: false,
                },
            ),
            (
                "x".to_owned(),
                Node {
                    gpus: 4,
                    cordoned: true,
                },
            ),
        ]);
        assert_eq!(kept(&twice), (4, 4, vec![(4, 1)]));
    }
}
