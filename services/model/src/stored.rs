//! Serde forms of the model types a service's sled checkpoint holds, named with
//! `#[serde(with = ...)]` on the holding field: [`BudgetTree`] (as `Option<BudgetTree>`) and
//! [`Inventory`].
//!
//! Place in the flow: the decision and submission services checkpoint their folded state;
//! these types carry no serde of their own, so that a tree is only ever built by
//! [`BudgetTree::from_accounts`]. The tree is stored as the account tree it was validated from
//! and validated again on load, so a decoded tree cannot break the tree's invariants.

use std::collections::BTreeMap;

use fairshare_events::pb;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::budget::{AccountId, BudgetTree};
use crate::inventory::{Inventory, Node};

/// One account with its children, as a `BudgetTreeSet` lists it.
#[derive(Serialize, Deserialize)]
struct AccountDef {
    name: String,
    share: u64,
    children: Vec<AccountDef>,
}

impl AccountDef {
    fn of(tree: &BudgetTree, id: AccountId) -> Self {
        let a = &tree.accounts[id];
        AccountDef {
            name: a.name.clone(),
            share: a.share,
            children: a
                .children
                .iter()
                .map(|&c| AccountDef::of(tree, c))
                .collect(),
        }
    }

    fn into_pb(self) -> pb::Account {
        pb::Account {
            name: self.name,
            share: self.share,
            children: self.children.into_iter().map(AccountDef::into_pb).collect(),
        }
    }
}

/// `Option<BudgetTree>` as its accounts; re-validated on load.
pub mod budget_tree {
    use super::*;

    /// Writes the tree as its accounts (roots and their children).
    pub fn serialize<S: Serializer>(
        tree: &Option<BudgetTree>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let accounts: Option<Vec<AccountDef>> = tree.as_ref().map(|t| {
            t.roots
                .iter()
                .filter(|&&id| id < t.accounts.len())
                .map(|&id| AccountDef::of(t, id))
                .collect()
        });
        accounts.serialize(serializer)
    }

    /// Reads the accounts and builds the tree from them, validated as a `BudgetTreeSet` is.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<BudgetTree>, D::Error> {
        let Some(accounts) = Option::<Vec<AccountDef>>::deserialize(deserializer)? else {
            return Ok(None);
        };
        let accounts: Vec<pb::Account> = accounts.into_iter().map(AccountDef::into_pb).collect();
        BudgetTree::from_accounts(&accounts)
            .map(Some)
            .map_err(|e| D::Error::custom(format!("budget tree: {e}")))
    }
}

/// [`Inventory`] as `name -> (gpus, cordoned)`.
pub mod inventory {
    use super::*;

    /// Writes `name -> (gpus, cordoned)`.
    pub fn serialize<S: Serializer>(
        inventory: &Inventory,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let nodes: BTreeMap<&str, (u32, bool)> = inventory
            .nodes()
            .iter()
            .map(|(name, n)| (name.as_str(), (n.gpus, n.cordoned)))
            .collect();
        nodes.serialize(serializer)
    }

    /// Reads `name -> (gpus, cordoned)`.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Inventory, D::Error> {
        let nodes = BTreeMap::<String, (u32, bool)>::deserialize(deserializer)?;
        Ok(Inventory::from_nodes(nodes.into_iter().map(
            |(name, (gpus, cordoned))| (name, Node { gpus, cordoned }),
        )))
    }
}
