//! Allocation slots: every allocation path any budget tree of the run names, numbered in path
//! order.
//!
//! Place in the flow: the replay builds [`Allocations`] once from the setup's tree and every
//! valid tree a `SetBudget` action brings, so a policy can keep per-allocation state in plain
//! vectors (no map lookups, deterministic order) across budget changes. A slot whose path the
//! tree in force does not have gets the fraction 0 until a tree names it again.

use std::collections::BTreeSet;

use fairshare_model::budget::{BudgetTree, Fraction};

/// The fraction of an allocation with no claim.
pub(crate) const NO_SHARE: Fraction = Fraction { num: 0, den: 1 };

/// Allocation paths of a run, sorted; a path's index is its slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Allocations {
    paths: Vec<String>,
}

impl Allocations {
    /// The allocation paths of all `trees`.
    pub fn new<'t>(trees: impl IntoIterator<Item = &'t BudgetTree>) -> Allocations {
        let paths: BTreeSet<&str> = trees
            .into_iter()
            .flat_map(|tree| tree.allocation_paths())
            .collect();
        Allocations {
            paths: paths.into_iter().map(str::to_owned).collect(),
        }
    }

    /// The slot of allocation `path`.
    pub fn slot(&self, path: &str) -> Option<usize> {
        self.paths.binary_search_by(|p| p.as_str().cmp(path)).ok()
    }

    /// Every slot's fraction of the cluster under `tree`.
    pub fn fractions(&self, tree: &BudgetTree) -> Vec<Fraction> {
        self.paths
            .iter()
            .map(|path| {
                tree.allocation(path)
                    .map_or(NO_SHARE, |id| tree.fraction(id))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairshare_events::pb;

    fn tree(leaves: &[(&str, u64)]) -> BudgetTree {
        let accounts: Vec<pb::Account> = leaves
            .iter()
            .map(|(name, share)| pb::Account {
                name: (*name).into(),
                share: *share,
                children: vec![],
            })
            .collect();
        BudgetTree::from_accounts(&accounts).unwrap()
    }

    #[test]
    fn slots_cover_every_tree_and_missing_paths_have_no_share() {
        let before = tree(&[("b", 1), ("a", 3)]);
        let after = tree(&[("c", 1), ("b", 1)]);
        let slots = Allocations::new([&before, &after]);
        assert_eq!(
            (slots.slot("a"), slots.slot("b"), slots.slot("c")),
            (Some(0), Some(1), Some(2))
        );
        assert_eq!(slots.slot("d"), None);
        let f = slots.fractions(&after);
        assert_eq!(f[0], NO_SHARE);
        assert_eq!((f[1].num, f[1].den), (1, 2));
        assert_eq!((f[2].num, f[2].den), (1, 2));
    }
}
