//! What a simulation runs on: one cluster's nodes, its budget tree and the virtual time span.
//!
//! Built from the same TOML files operators apply (`fairshare budget apply`, `fairshare
//! inventory apply`), so a budget change can be tried in the simulator before it is applied.

use fairshare_events::pb;
use fairshare_model::budget::BudgetTree;
use fairshare_model::files::{self, FileError};

/// The virtual epoch of every simulation: Monday 2026-01-05 00:00:00 UTC, in Unix ms. Trace
/// times (seconds since the trace's start) are offsets from it. An hour-aligned start keeps the
/// hourly ledger's hours aligned with the trace's.
pub const EPOCH_MS: i64 = 1_767_571_200_000;

/// One cluster as the simulator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// Cluster name (a subject token).
    pub cluster: String,
    /// The budget tree in force from the start, as the event that sets it.
    pub budget: pb::BudgetTreeSet,
    /// The same tree, validated.
    pub tree: BudgetTree,
    /// Node name and GPU count.
    pub nodes: Vec<(String, u32)>,
    /// Virtual time the simulation stops at (Unix ms); work still queued or running then is
    /// reported as unfinished.
    pub end_ms: i64,
}

/// Why a setup could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A budget or inventory file is invalid.
    #[error(transparent)]
    File(#[from] FileError),
    /// The budget tree is not valid.
    #[error("budget tree: {0}")]
    Budget(String),
    /// The budget and inventory files name different clusters.
    #[error("the budget file is for cluster {budget:?} but the inventory is for {inventory:?}")]
    ClusterMismatch {
        /// Cluster of the budget file.
        budget: String,
        /// Cluster of the inventory file.
        inventory: String,
    },
    /// The inventory has no GPUs.
    #[error("the inventory has no GPU nodes")]
    NoGpus,
    /// More nodes than the simulator runs.
    #[error("the inventory has {count} nodes; the simulator runs at most {MAX_NODES}")]
    TooManyNodes {
        /// Nodes in the inventory.
        count: usize,
    },
}

/// The most nodes a simulated cluster has (`--nodes`, or an inventory's groups together).
pub const MAX_NODES: usize = 100_000;

impl Setup {
    /// A setup from budget and inventory file texts, running until `end_ms`.
    pub fn from_files(budget: &str, inventory: &str, end_ms: i64) -> Result<Setup, SetupError> {
        let budget = files::parse_budget(budget)?;
        let inventory = files::parse_inventory(inventory)?;
        if budget.cluster != inventory.cluster {
            return Err(SetupError::ClusterMismatch {
                budget: budget.cluster,
                inventory: inventory.cluster,
            });
        }
        Setup::new(budget, inventory.nodes, end_ms)
    }

    /// A setup from an already-built tree and node list.
    pub fn new(
        budget: pb::BudgetTreeSet,
        nodes: Vec<(String, u32)>,
        end_ms: i64,
    ) -> Result<Setup, SetupError> {
        let tree = BudgetTree::from_accounts(&budget.accounts)
            .map_err(|e| SetupError::Budget(e.to_string()))?;
        if nodes.len() > MAX_NODES {
            return Err(SetupError::TooManyNodes { count: nodes.len() });
        }
        if nodes.iter().all(|(_, g)| *g == 0) {
            return Err(SetupError::NoGpus);
        }
        Ok(Setup {
            cluster: budget.cluster.clone(),
            budget,
            tree,
            nodes,
            end_ms,
        })
    }

    /// `count` nodes of `gpus` GPUs named `<prefix>000`, `<prefix>001`, ... (`<prefix>0000` on
    /// from 1,001 nodes).
    pub fn uniform_nodes(prefix: &str, count: usize, gpus: u32) -> Vec<(String, u32)> {
        // At least three digits, more when the count needs them: names sort as they are
        // numbered, so each registration adds to the end of the folds' node lists.
        let width = count.saturating_sub(1).to_string().len().max(3);
        (0..count)
            .map(|i| (format!("{prefix}{i:0width$}"), gpus))
            .collect()
    }

    /// Total GPUs of the cluster at the start.
    pub fn total_gpus(&self) -> u64 {
        self.nodes.iter().map(|(_, g)| u64::from(*g)).sum()
    }

    /// The allocation paths of the tree, in path order.
    pub fn allocations(&self) -> Vec<String> {
        self.tree.allocation_paths().map(str::to_owned).collect()
    }

    /// Whether no allocation holds any fraction of the cluster (each has a share of 0 on its
    /// path, its own or an ancestor's): then nothing is owed, and the report's owed figures
    /// measure nothing.
    pub fn owes_nothing(&self) -> bool {
        self.tree
            .accounts
            .iter()
            .zip(self.tree.fractions())
            .all(|(account, fraction)| !account.is_allocation() || fraction.num == 0)
    }

    /// The events every policy's log starts with: the budget tree, then the nodes.
    pub fn initial_events(&self, at_ms: i64) -> Vec<pb::Event> {
        let mut out = vec![pb::Event {
            at_ms,
            body: Some(pb::event::Body::BudgetTreeSet(self.budget.clone())),
        }];
        for (node, gpus) in &self.nodes {
            out.push(pb::Event {
                at_ms,
                body: Some(pb::event::Body::NodeRegistered(pb::NodeRegistered {
                    cluster: self.cluster.clone(),
                    node: node.clone(),
                    gpus: *gpus,
                })),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Setup;

    fn setup(budget: &str) -> Setup {
        let budget = fairshare_model::files::parse_budget(budget).unwrap();
        Setup::new(budget, Setup::uniform_nodes("n", 1, 8), 0).unwrap()
    }

    #[test]
    fn a_tree_owes_nothing_only_when_every_allocation_has_no_fraction() {
        let zero = "cluster = \"c\"\n[accounts.a]\nshare = 0\n[accounts.b]\nshare = 0\n";
        assert!(setup(zero).owes_nothing());
        // A parent of share 0 gives its children nothing, whatever their own shares.
        let under_zero = "cluster = \"c\"\n[accounts.a]\nshare = 0\n[accounts.a.x]\nshare = 5\n";
        assert!(setup(under_zero).owes_nothing());
        let one = "cluster = \"c\"\n[accounts.a]\nshare = 0\n[accounts.b]\nshare = 1\n";
        assert!(!setup(one).owes_nothing());
    }

    /// Nodes are named so that they sort as numbered, past a thousand too; an inventory of
    /// more nodes than the simulator runs is refused by count.
    #[test]
    fn node_names_sort_as_numbered_and_too_many_nodes_are_refused() {
        let names: Vec<String> = Setup::uniform_nodes("n", 1_001, 8)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(names[0], "n0000");
        assert_eq!(names[1_000], "n1000");
        assert!(names.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Setup::uniform_nodes("n", 1_000, 8)[999].0, "n999");
        let budget = "cluster = \"c\"\n[accounts.a]\nshare = 1\n";
        let budget = fairshare_model::files::parse_budget(budget).unwrap();
        let nodes = Setup::uniform_nodes("n", super::MAX_NODES + 1, 1);
        let err = Setup::new(budget, nodes, 0).err().unwrap().to_string();
        assert_eq!(
            err,
            "the inventory has 100001 nodes; the simulator runs at most 100000"
        );
    }
}
