//! Where a baseline puts a job: the cluster's free GPUs per node, best fit for single-node
//! jobs, whole free nodes for multi-node jobs.
//!
//! Place in the flow: the replay ([`super::replay`]) owns one [`Nodes`] for the whole run; each
//! scheduling pass asks it whether a shape fits ([`Nodes::fits`]) and takes GPUs
//! ([`Nodes::place`]); finishes give them back ([`Nodes::release`]) and cordons take nodes out
//! of placement without touching the jobs on them. All three baselines share it, so they differ
//! only in the order they offer jobs, never in how a job is packed.
//!
//! Rules: a single-node job goes on the node with the fewest free GPUs that still holds it, ties
//! by node name (so small jobs pack onto busy nodes and whole nodes stay whole for large jobs);
//! a multi-node job takes wholly free nodes of exactly its GPUs per node, lowest names first.
//! Nothing is ever over-committed and a cordoned node takes nothing.
//!
//! Cost: uncordoned nodes with free GPUs sit in an ordered set keyed by (free GPUs, name order),
//! so best fit is one range lookup; wholly free nodes are kept per GPU count, so a multi-node
//! fit is a length check. No operation scans the nodes (placing around a reservation skips its
//! few nodes).

use std::collections::{BTreeMap, BTreeSet};

use fairshare_model::inventory::Inventory;
use fairshare_model::shape::Shape;

/// GPUs a job holds on one node: (node index, GPUs).
pub(crate) type Held = (usize, u32);

/// The free GPUs of a cluster's nodes, indexed in node-name order.
#[derive(Debug, Clone)]
pub(crate) struct Nodes {
    names: Vec<String>,
    capacity: Vec<u32>,
    free: Vec<u32>,
    cordoned: Vec<bool>,
    /// (free GPUs, index) of uncordoned nodes with at least one free GPU.
    open: BTreeSet<(u32, usize)>,
    /// Wholly free uncordoned nodes, by their GPU count.
    whole: BTreeMap<u32, BTreeSet<usize>>,
    free_gpus: u64,
    uncordoned_gpus: u64,
}

impl Nodes {
    /// Every registered node of `inventory`, all free, with its cordon state.
    pub fn new(inventory: &Inventory) -> Nodes {
        let mut nodes = Nodes {
            names: Vec::with_capacity(inventory.nodes().len()),
            capacity: Vec::with_capacity(inventory.nodes().len()),
            free: Vec::with_capacity(inventory.nodes().len()),
            cordoned: Vec::with_capacity(inventory.nodes().len()),
            open: BTreeSet::new(),
            whole: BTreeMap::new(),
            free_gpus: 0,
            uncordoned_gpus: 0,
        };
        for (name, node) in inventory.nodes() {
            let i = nodes.names.len();
            nodes.names.push(name.clone());
            nodes.capacity.push(node.gpus);
            nodes.free.push(node.gpus);
            nodes.cordoned.push(true);
            if !node.cordoned {
                nodes.uncordon_index(i);
            }
        }
        nodes
    }

    /// The name of node `index`.
    pub fn name(&self, index: usize) -> &str {
        &self.names[index]
    }

    /// How many nodes are registered (cordoned or not).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Free GPUs of node `index`, cordoned or not.
    pub fn free_of(&self, index: usize) -> u32 {
        self.free[index]
    }

    /// GPUs of node `index`.
    pub fn capacity_of(&self, index: usize) -> u32 {
        self.capacity[index]
    }

    /// Whether node `index` takes new work (is not cordoned).
    pub fn takes_work(&self, index: usize) -> bool {
        !self.cordoned[index]
    }

    /// Free GPUs on nodes that take new work.
    pub fn free_gpus(&self) -> u64 {
        self.free_gpus
    }

    /// GPUs of the nodes that are not cordoned, busy or not: the capacity quotas divide.
    pub fn uncordoned_gpus(&self) -> u64 {
        self.uncordoned_gpus
    }

    /// Whether a job of `shape` could be placed now.
    pub fn fits(&self, shape: Shape) -> bool {
        if shape.nodes <= 1 {
            self.open
                .last()
                .is_some_and(|&(free, _)| free >= shape.gpus_per_node)
        } else {
            self.whole
                .get(&shape.gpus_per_node)
                .is_some_and(|set| set.len() >= shape.nodes as usize)
        }
    }

    /// Takes GPUs for a job of `shape` and says where, or `None` (taking nothing) when it does
    /// not fit.
    pub fn place(&mut self, shape: Shape) -> Option<Vec<Held>> {
        self.place_avoiding(shape, &[])
    }

    /// As [`Nodes::place`], on nodes other than `avoid` (indices: a reservation's).
    pub fn place_avoiding(&mut self, shape: Shape, avoid: &[usize]) -> Option<Vec<Held>> {
        let per_node = shape.gpus_per_node;
        let chosen: Vec<usize> = if shape.nodes <= 1 {
            let best = self
                .open
                .range((per_node.max(1), 0)..)
                .map(|&(_, i)| i)
                .find(|i| !avoid.contains(i))?;
            vec![best]
        } else {
            let set = self.whole.get(&per_node)?;
            let wanted = shape.nodes as usize;
            let chosen: Vec<usize> = set
                .iter()
                .copied()
                .filter(|i| !avoid.contains(i))
                .take(wanted)
                .collect();
            if chosen.len() < wanted {
                return None;
            }
            chosen
        };
        for &i in &chosen {
            self.set_free(i, self.free[i] - per_node);
        }
        Some(chosen.into_iter().map(|i| (i, per_node)).collect())
    }

    /// Gives back what a job held.
    pub fn release(&mut self, held: &[Held]) {
        for &(i, gpus) in held {
            let free = (self.free[i] + gpus).min(self.capacity[i]);
            self.set_free(i, free);
        }
    }

    /// Stops new placements on `node`; its running jobs keep their GPUs. Unknown names and
    /// nodes already cordoned change nothing.
    pub fn cordon(&mut self, node: &str) {
        if let Some(i) = self.index(node)
            && !self.cordoned[i]
        {
            self.unlist(i);
            self.cordoned[i] = true;
            self.free_gpus -= u64::from(self.free[i]);
            self.uncordoned_gpus -= u64::from(self.capacity[i]);
        }
    }

    /// Allows new placements on `node` again. Unknown names and open nodes change nothing.
    pub fn uncordon(&mut self, node: &str) {
        if let Some(i) = self.index(node)
            && self.cordoned[i]
        {
            self.uncordon_index(i);
        }
    }

    fn uncordon_index(&mut self, i: usize) {
        self.cordoned[i] = false;
        self.free_gpus += u64::from(self.free[i]);
        self.uncordoned_gpus += u64::from(self.capacity[i]);
        self.list(i);
    }

    fn index(&self, node: &str) -> Option<usize> {
        self.names.binary_search_by(|n| n.as_str().cmp(node)).ok()
    }

    fn set_free(&mut self, i: usize, free: u32) {
        self.unlist(i);
        if !self.cordoned[i] {
            self.free_gpus = self.free_gpus - u64::from(self.free[i]) + u64::from(free);
        }
        self.free[i] = free;
        self.list(i);
    }

    /// Takes node `i` out of the lookup sets (before its free GPUs change).
    fn unlist(&mut self, i: usize) {
        let (free, capacity) = (self.free[i], self.capacity[i]);
        self.open.remove(&(free, i));
        if free == capacity
            && let Some(set) = self.whole.get_mut(&capacity)
        {
            set.remove(&i);
            if set.is_empty() {
                self.whole.remove(&capacity);
            }
        }
    }

    /// Puts node `i` back into the lookup sets it belongs to.
    fn list(&mut self, i: usize) {
        let (free, capacity) = (self.free[i], self.capacity[i]);
        if self.cordoned[i] || free == 0 {
            return;
        }
        self.open.insert((free, i));
        if free == capacity {
            self.whole.entry(capacity).or_default().insert(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(sizes: &[u32]) -> Nodes {
        let mut inventory = Inventory::default();
        for (i, gpus) in sizes.iter().enumerate() {
            inventory.register(&format!("n{i}"), *gpus);
        }
        Nodes::new(&inventory)
    }

    fn one(gpus: u32) -> Shape {
        Shape {
            nodes: 1,
            gpus_per_node: gpus,
        }
    }

    #[test]
    fn best_fit_packs_small_jobs_onto_the_fullest_node() {
        let mut n = nodes(&[8, 8, 8]);
        assert_eq!(n.place(one(4)), Some(vec![(0, 4)]));
        n.place(one(2)).unwrap();
        // n0 has 2 free, n1 and n2 have 8: a 2-GPU job fills n0 rather than opening a node.
        assert_eq!(n.place(one(2)), Some(vec![(0, 2)]));
        assert_eq!(n.place(one(3)), Some(vec![(1, 3)]));
        // n1 has 5 free, n2 has 8: 5 fits n1 exactly.
        assert_eq!(n.place(one(5)), Some(vec![(1, 5)]));
        assert_eq!(n.free_gpus(), 8);
    }

    #[test]
    fn multi_node_jobs_take_only_wholly_free_nodes() {
        let mut n = nodes(&[8, 8, 8, 4]);
        n.place(one(1)).unwrap(); // n3 (4 GPUs) is the best fit for one GPU.
        n.place(one(5)).unwrap(); // n0
        let two = Shape {
            nodes: 2,
            gpus_per_node: 8,
        };
        assert!(n.fits(two));
        assert_eq!(n.place(two), Some(vec![(1, 8), (2, 8)]));
        assert!(!n.fits(two));
        assert_eq!(n.place(two), None);
        n.release(&[(1, 8)]);
        assert!(!n.fits(two));
        n.release(&[(0, 5)]);
        assert_eq!(n.place(two), Some(vec![(0, 8), (1, 8)]));
    }

    #[test]
    fn cordoned_nodes_take_nothing_but_keep_their_jobs() {
        let mut n = nodes(&[8, 8]);
        let held = n.place(one(8)).unwrap();
        assert_eq!(held, vec![(0, 8)]);
        n.cordon("n1");
        assert_eq!((n.free_gpus(), n.uncordoned_gpus()), (0, 8));
        assert!(!n.fits(one(1)));
        n.cordon("n0");
        n.release(&held);
        assert_eq!((n.free_gpus(), n.uncordoned_gpus()), (0, 0));
        assert_eq!(n.place(one(1)), None);
        n.uncordon("n0");
        n.uncordon("nope");
        assert_eq!((n.free_gpus(), n.uncordoned_gpus()), (8, 8));
        assert_eq!(n.place(one(8)), Some(vec![(0, 8)]));
    }
}
