//! Every registered node with what the state knows about it, in one ordered walk.
//!
//! Place in the flow: the decision cycle ([`crate::domain::place`]) and every preemption pass
//! read each registered node with its holdings and maintenance windows, several times per
//! event in a busy cluster. Looking each node's load up by name costs string comparisons
//! (node names share long prefixes) and a B-tree walk chases pointers, so the state keeps a
//! derived index (`NodeIndex`) that lists the registered nodes in name order with the
//! position of each one's load, and the walk reads arrays only. Maintenance windows are
//! joined by name, which costs nothing while no window is scheduled.

use std::collections::BTreeMap;
use std::sync::Arc;

use fairshare_model::inventory::{Inventory, Node};

use super::flat::FlatMap;
use super::join::take_matching;
use super::state::{DecisionState, Holding, NodeLoad, Window};

/// One registered node, its load and its maintenance windows.
#[derive(Debug, Clone, Copy)]
pub struct NodeRow<'s> {
    /// The node's name.
    pub name: &'s str,
    /// Its registration (GPUs, cordon).
    pub node: &'s Node,
    /// Who holds its GPUs; `None` when nobody does.
    pub load: Option<&'s NodeLoad>,
    /// Its maintenance windows, sorted by start (empty if none).
    pub windows: &'s [Window],
}

impl<'s> NodeRow<'s> {
    /// The holdings on the node, sorted by job id (empty when nobody holds GPUs there).
    pub fn holdings(&self) -> &'s [(Arc<str>, Holding)] {
        self.load.map_or(&[], |l| l.holdings.as_slice())
    }

    /// GPUs held on the node.
    pub fn used(&self) -> u32 {
        self.load.map_or(0, |l| l.used)
    }
}

/// A registered node, copied from the inventory, with the position of its load in the
/// state's loads.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Registered {
    name: String,
    node: Node,
    load: Option<usize>,
}

/// The registered nodes in name order, each with the position of its load: derived from the
/// inventory and the loads (not checkpointed), so a walk over every node reads two arrays and
/// compares no names.
///
/// The inventory changes rarely (node events), and then the index is built again; the loads
/// gain or lose an entry whenever a node gets its first job or loses its last, and then the
/// positions are shifted in place ([`NodeIndex::load_inserted`], [`NodeIndex::load_removed`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeIndex {
    nodes: Vec<Registered>,
    /// How many of them are cordoned (a cordon is a node event, so this is built with the
    /// index and never goes stale).
    cordoned: usize,
    /// GPUs of all of them, cordoned or not (likewise built with the index).
    total_gpus: u64,
    /// Their free GPUs, counted as loads and registrations change ([`Room`]).
    room: Room,
}

/// The free GPUs of the uncordoned registered nodes, tallied so that "could a job of this shape
/// fit" ([`super::fit::FreeRoom`]) is read without a walk over every node: the simulator and the
/// preemption pass ask before every cycle and every packing search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Room {
    /// How many such nodes have each number of free GPUs (above 0).
    by_free: BTreeMap<u32, u32>,
    /// How many such nodes of each size are wholly free.
    whole: BTreeMap<u32, u32>,
}

impl Room {
    /// Adds (`add`) or takes away a node registered as `node` with `used` GPUs held.
    fn count(&mut self, node: &Node, used: u32, add: bool) {
        let free = node.gpus.saturating_sub(used);
        if node.cordoned || free == 0 {
            return;
        }
        let bump = |map: &mut BTreeMap<u32, u32>, key: u32| {
            let n = map.entry(key).or_default();
            *n = if add { *n + 1 } else { n.saturating_sub(1) };
            if *n == 0 {
                map.remove(&key);
            }
        };
        bump(&mut self.by_free, free);
        if free == node.gpus {
            bump(&mut self.whole, node.gpus);
        }
    }
}

impl NodeIndex {
    /// The index of `inventory` over `loads`.
    pub fn build(inventory: &Inventory, loads: &FlatMap<Arc<str>, NodeLoad>) -> NodeIndex {
        let nodes: Vec<Registered> = inventory
            .nodes()
            .iter()
            .map(|(name, node)| Registered {
                name: name.clone(),
                node: node.clone(),
                load: loads.index_of(name.as_str()),
            })
            .collect();
        let mut room = Room::default();
        for r in &nodes {
            room.count(&r.node, used_at(loads, r.load), true);
        }
        NodeIndex {
            nodes,
            cordoned: inventory.nodes().values().filter(|n| n.cordoned).count(),
            total_gpus: inventory.total_gpus(),
            room,
        }
    }

    /// GPUs held on node `name` went from `before` to `after` (a job placed there or gone).
    pub fn used_changed(&mut self, name: &str, before: u32, after: u32) {
        if before == after {
            return;
        }
        if let Ok(k) = self.nodes.binary_search_by(|r| r.name.as_str().cmp(name)) {
            let node = &self.nodes[k].node;
            self.room.count(node, before, false);
            self.room.count(node, after, true);
        }
    }

    /// The most free GPUs on one uncordoned node, and the wholly free uncordoned nodes as
    /// `(GPUs, how many)` by size.
    pub fn free_room(&self) -> (u32, Vec<(u32, u32)>) {
        let most_free = self.room.by_free.keys().next_back().copied().unwrap_or(0);
        let whole = self.room.whole.iter().map(|(g, n)| (*g, *n)).collect();
        (most_free, whole)
    }

    /// Node `name` was registered, changed or removed: `node` is what the inventory holds for
    /// it now. One entry moves, so registering a cluster node by node costs each node a search,
    /// not a new index (100,000 nodes took the simulator minutes that way).
    pub fn node_changed(
        &mut self,
        name: &str,
        node: Option<&Node>,
        loads: &FlatMap<Arc<str>, NodeLoad>,
    ) {
        let at = self.nodes.binary_search_by(|r| r.name.as_str().cmp(name));
        let used = used_at(loads, loads.index_of(name));
        if let Ok(k) = at {
            let old = &self.nodes[k].node;
            self.total_gpus = self.total_gpus.saturating_sub(u64::from(old.gpus));
            self.cordoned = self.cordoned.saturating_sub(usize::from(old.cordoned));
            self.room.count(old, used, false);
        }
        match (at, node) {
            (Ok(k), Some(node)) => self.nodes[k].node = node.clone(),
            (Err(k), Some(node)) => self.nodes.insert(
                k,
                Registered {
                    name: name.to_owned(),
                    node: node.clone(),
                    load: loads.index_of(name),
                },
            ),
            (Ok(k), None) => {
                self.nodes.remove(k);
            }
            (Err(_), None) => {}
        }
        if let Some(node) = node {
            self.total_gpus = self.total_gpus.saturating_add(u64::from(node.gpus));
            self.cordoned = self.cordoned.saturating_add(usize::from(node.cordoned));
            self.room.count(node, used, true);
        }
    }

    /// A load for node `name` was inserted at position `at`.
    pub fn load_inserted(&mut self, at: usize, name: &str) {
        for r in &mut self.nodes {
            if let Some(i) = &mut r.load
                && *i >= at
            {
                *i += 1;
            }
        }
        if let Ok(k) = self.nodes.binary_search_by(|r| r.name.as_str().cmp(name)) {
            self.nodes[k].load = Some(at);
        }
    }

    /// The load at position `at` was removed.
    pub fn load_removed(&mut self, at: usize) {
        for r in &mut self.nodes {
            r.load = match r.load {
                Some(i) if i == at => None,
                Some(i) if i > at => Some(i - 1),
                other => other,
            };
        }
    }
}

/// GPUs held on the node whose load is at `at` (none without a load).
fn used_at(loads: &FlatMap<Arc<str>, NodeLoad>, at: Option<usize>) -> u32 {
    at.map_or(0, |i| loads.value_at(i).used)
}

impl DecisionState {
    /// Whether any registered node is cordoned.
    pub fn any_cordoned(&self) -> bool {
        self.registered.cordoned > 0
    }

    /// GPUs of every registered node, cordoned ones too (the inventory's total, kept with
    /// the node index: ranking asks for it in every cycle and pass).
    pub fn total_gpus(&self) -> u64 {
        self.registered.total_gpus
    }

    /// Every registered node in name order, with its load and maintenance windows (loads of
    /// nodes that are not registered are skipped, as a lookup by registered name would).
    pub fn nodes_with_loads(&self) -> impl Iterator<Item = NodeRow<'_>> {
        let mut maintenance = self.maintenance.iter().peekable();
        // Usually no window is scheduled at all: then there is nothing to join.
        let any_windows = !self.maintenance.is_empty();
        self.registered.nodes.iter().map(move |r| NodeRow {
            name: &r.name,
            node: &r.node,
            load: r.load.map(|i| self.loads.value_at(i)),
            windows: if any_windows {
                take_matching(&mut maintenance, &r.name).map_or(&[][..], Vec::as_slice)
            } else {
                &[]
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registering, re-registering, cordoning and removing nodes one at a time, in no name
    /// order and with a load on one of them, leaves the index a fresh build would give.
    #[test]
    fn the_index_moves_in_step_with_the_inventory_node_by_node() {
        let mut inventory = Inventory::default();
        let mut loads: FlatMap<Arc<str>, NodeLoad> = FlatMap::default();
        loads.index_or_default("n1", || Arc::from("n1"));
        let mut index = NodeIndex::default();
        let mut step = |inventory: &Inventory, name: &str| {
            index.node_changed(name, inventory.nodes().get(name), &loads);
            assert_eq!(index, NodeIndex::build(inventory, &loads), "after {name}");
            (index.total_gpus, index.cordoned, index.nodes.len())
        };
        for (name, gpus) in [("n2", 8), ("n10", 4), ("n1", 8)] {
            inventory.register(name, gpus);
            step(&inventory, name);
        }
        inventory.register("n2", 16);
        assert_eq!(step(&inventory, "n2"), (28, 0, 3));
        inventory.set_cordoned("n10", true);
        assert_eq!(step(&inventory, "n10"), (28, 1, 3));
        inventory.remove("n10");
        assert_eq!(step(&inventory, "n10"), (24, 0, 2));
        // An unknown node removed again changes nothing.
        assert_eq!(step(&inventory, "n10"), (24, 0, 2));
        assert_eq!(index.nodes[0].load, Some(0), "n1 keeps its load");

        // The free room moves with the GPUs held: n1 (8) and n2 (16) wholly free, then 6 of
        // n1's held, then n2 cordoned.
        assert_eq!(index.free_room(), (16, vec![(8, 1), (16, 1)]));
        loads.value_at_mut(0).used = 6;
        index.used_changed("n1", 0, 6);
        assert_eq!(index, NodeIndex::build(&inventory, &loads));
        assert_eq!(index.free_room(), (16, vec![(16, 1)]));
        inventory.set_cordoned("n2", true);
        index.node_changed("n2", inventory.nodes().get("n2"), &loads);
        assert_eq!(index, NodeIndex::build(&inventory, &loads));
        assert_eq!(index.free_room(), (2, vec![]));
    }
}
