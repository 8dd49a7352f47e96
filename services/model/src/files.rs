//! The TOML files managers and operators write, turned into the events they publish.
//!
//! Budget tree (`fairshare budget apply FILE`):
//!
//! ```toml
//! cluster = "alpha"          # the GPU cluster this tree divides
//!
//! [accounts.research]        # a top-level account (organisation or program)
//! share = 3                  # relative to its siblings; 0 = no claim
//!
//! [accounts.research.nlp]    # a child: any table inside an account is a child account
//! share = 1
//!
//! [accounts.infra]
//! share = 1
//! ```
//!
//! Accounts without child tables are allocations: jobs name them by path (`research/nlp`).
//! The fractions are claims on whatever capacity the cluster's inventory holds at the time.
//!
//! Inventory (`fairshare inventory apply FILE`):
//!
//! ```toml
//! cluster = "alpha"
//!
//! [[nodes]]                  # a group of identical nodes named gpu000 .. gpu127
//! prefix = "gpu"
//! count = 128
//! gpus = 8
//!
//! [[nodes]]                  # or one node by name
//! name = "fat01"
//! gpus = 16
//! ```
//!
//! Numbers take at least three digits and grow past them (`gpu999`, `gpu1000`), so a group that
//! grows keeps its nodes' names: a name that changed would register a second node.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use fairshare_events::{pb, subjects};

use crate::budget::{BudgetError, BudgetTree};

/// Why a policy or inventory file was refused. Nothing is published for a refused file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Not TOML at all.
    #[error("not valid TOML: {0}")]
    Toml(String),
    /// A required key is missing or has the wrong type.
    #[error("{at}: {what}")]
    Field {
        /// Where in the file (table path).
        at: String,
        /// What is wrong.
        what: String,
    },
    /// The tree parsed but is not a valid budget tree. (Not the error's source: its words are
    /// in this message already, and a report of the chain would say them twice.)
    #[error("invalid budget tree: {0}")]
    Budget(BudgetError),
}

impl From<BudgetError> for FileError {
    fn from(e: BudgetError) -> Self {
        FileError::Budget(e)
    }
}

fn field(at: impl Into<String>, what: impl Into<String>) -> FileError {
    FileError::Field {
        at: at.into(),
        what: what.into(),
    }
}

fn cluster_of(table: &toml::Table) -> Result<String, FileError> {
    let cluster = table
        .get("cluster")
        .and_then(toml::Value::as_str)
        .ok_or_else(|| field("top level", "missing `cluster = \"name\"`"))?;
    if !subjects::is_valid_token(cluster) {
        return Err(field(
            "cluster",
            format!(
                "{cluster:?} is not a valid cluster name (letters, digits, _ and -, starting with a letter or digit)"
            ),
        ));
    }
    Ok(cluster.to_owned())
}

/// Parses and validates a budget tree file into the event that sets it.
pub fn parse_budget(text: &str) -> Result<pb::BudgetTreeSet, FileError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| FileError::Toml(e.to_string()))?;
    let cluster = cluster_of(&table)?;
    for key in table.keys() {
        if key != "cluster" && key != "accounts" {
            return Err(field(
                "top level",
                format!("unknown key `{key}` (expected `cluster` and `accounts`)"),
            ));
        }
    }
    let accounts = table
        .get("accounts")
        .and_then(toml::Value::as_table)
        .ok_or_else(|| field("top level", "missing `[accounts.<name>]` tables"))?;
    let accounts = parse_accounts(accounts, "accounts")?;
    // Validate with the same code the services fold with, so a file that applies is a tree
    // every service accepts; and, for new trees, fine enough for the share floors.
    BudgetTree::from_accounts(&accounts)?.check_fine_enough()?;
    Ok(pb::BudgetTreeSet { cluster, accounts })
}

fn parse_accounts(table: &toml::Table, at: &str) -> Result<Vec<pb::Account>, FileError> {
    let mut out = Vec::new();
    for (name, value) in table {
        let here = format!("{at}.{name}");
        let body = value
            .as_table()
            .ok_or_else(|| field(&here, "an account must be a table with a `share`"))?;
        let share = body
            .get("share")
            .ok_or_else(|| field(&here, "missing `share`"))?
            .as_integer()
            .ok_or_else(|| field(&here, "`share` must be an integer"))?;
        let share = u64::try_from(share)
            .map_err(|_| field(&here, format!("`share` must be >= 0, got {share}")))?;
        let mut children = toml::Table::new();
        for (key, v) in body {
            match (key.as_str(), v) {
                ("share", _) => {}
                (_, toml::Value::Table(_)) => {
                    children.insert(key.clone(), v.clone());
                }
                _ => {
                    return Err(field(
                        &here,
                        format!("unknown key `{key}` (child accounts are tables)"),
                    ));
                }
            }
        }
        // Siblings told apart by case alone are one team typed twice, not two: the services
        // would keep both (names are case-sensitive in the log), so the file is refused here.
        if let Some(earlier) = out
            .iter()
            .find(|a: &&pb::Account| a.name.eq_ignore_ascii_case(name))
        {
            return Err(field(
                &here,
                format!(
                    "`{name}` and `{}` differ only by case; use one name",
                    earlier.name
                ),
            ));
        }
        out.push(pb::Account {
            name: name.clone(),
            share,
            children: parse_accounts(&children, &here)?,
        });
    }
    Ok(out)
}

/// A parsed inventory file: the nodes a cluster should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryFile {
    /// Cluster name.
    pub cluster: String,
    /// Node name and GPU count, sorted by name.
    pub nodes: Vec<(String, u32)>,
}

impl InventoryFile {
    /// The `NodeRegistered` events that bring a cluster to this inventory.
    pub fn registrations(&self) -> Vec<pb::NodeRegistered> {
        self.nodes
            .iter()
            .map(|(node, gpus)| pb::NodeRegistered {
                cluster: self.cluster.clone(),
                node: node.clone(),
                gpus: *gpus,
            })
            .collect()
    }
}

/// Largest GPU count one node may declare.
pub const MAX_GPUS_PER_NODE: i64 = 1024;
/// Largest node count one group may declare.
pub const MAX_NODES_PER_GROUP: i64 = 100_000;

/// Parses and validates an inventory file.
pub fn parse_inventory(text: &str) -> Result<InventoryFile, FileError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| FileError::Toml(e.to_string()))?;
    let cluster = cluster_of(&table)?;
    if let Some(key) = table.keys().find(|k| *k != "cluster" && *k != "nodes") {
        return Err(field(
            "top level",
            format!("unknown key `{key}` (expected `cluster` and `[[nodes]]` groups)"),
        ));
    }
    let groups = table
        .get("nodes")
        .and_then(toml::Value::as_array)
        .ok_or_else(|| field("top level", "missing `[[nodes]]` entries"))?;
    // Each node's name folded to lower case, and the group that declared it: host names are
    // case-insensitive, so `GPU000` beside `gpu000` is one host counted twice.
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut nodes = Vec::new();
    for (i, group) in groups.iter().enumerate() {
        let group = group
            .as_table()
            .ok_or_else(|| field(format!("[[nodes]] group {}", i + 1), "must be a table"))?;
        let at = group_label(i, group);
        let int = |key: &str| -> Result<Option<i64>, FileError> {
            match group.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_integer()
                    .map(Some)
                    .ok_or_else(|| field(&at, format!("`{key}` must be an integer"))),
            }
        };
        let gpus = int("gpus")?.ok_or_else(|| field(&at, "missing `gpus`"))?;
        if !(1..=MAX_GPUS_PER_NODE).contains(&gpus) {
            return Err(field(
                &at,
                format!("`gpus` must be 1..={MAX_GPUS_PER_NODE}, got {gpus}"),
            ));
        }
        let gpus = gpus as u32;
        if let Some(key) = group
            .keys()
            .find(|k| !matches!(k.as_str(), "gpus" | "name" | "prefix" | "count"))
        {
            return Err(field(
                &at,
                format!(
                    "unknown key `{key}` (expected `gpus`, and `name` or `prefix` and `count`)"
                ),
            ));
        }
        let group_names: Vec<String> = match (group.get("name"), group.get("prefix")) {
            (Some(_), None) if group.contains_key("count") => {
                return Err(field(
                    &at,
                    "a `name` group is one node: `count` needs `prefix`",
                ));
            }
            (Some(name), None) => {
                let name = name
                    .as_str()
                    .ok_or_else(|| field(&at, "`name` must be a string"))?;
                vec![name.to_owned()]
            }
            (None, Some(prefix)) => {
                let prefix = prefix
                    .as_str()
                    .ok_or_else(|| field(&at, "`prefix` must be a string"))?;
                let count =
                    int("count")?.ok_or_else(|| field(&at, "a `prefix` group needs `count`"))?;
                if !(1..=MAX_NODES_PER_GROUP).contains(&count) {
                    return Err(field(
                        &at,
                        format!("`count` must be 1..={MAX_NODES_PER_GROUP}, got {count}"),
                    ));
                }
                (0..count).map(|n| format!("{prefix}{n:03}")).collect()
            }
            _ => return Err(field(&at, "give either `name` or `prefix` and `count`")),
        };
        for name in group_names {
            if let Some(why) = node_name_problem(&name) {
                return Err(field(
                    &at,
                    format!("{name:?} is not a valid node name: {why}"),
                ));
            }
            match names.entry(name.to_ascii_lowercase()) {
                Entry::Occupied(first) => {
                    let again = if first.key() == &name {
                        format!("node {name:?} is declared twice (first in {})", first.get())
                    } else {
                        format!(
                            "node {name:?} differs only by case from a node declared in {}; \
                             host names are case-insensitive, so it would count the same GPUs \
                             twice",
                            first.get()
                        )
                    };
                    return Err(field(&at, again));
                }
                Entry::Vacant(v) => {
                    v.insert(at.clone());
                }
            }
            nodes.push((name, gpus));
        }
    }
    if nodes.is_empty() {
        return Err(field("nodes", "the inventory has no nodes"));
    }
    nodes.sort();
    Ok(InventoryFile { cluster, nodes })
}

/// How an error names the `index`-th `[[nodes]]` group: by its position counted from 1, and by
/// its `name` or `prefix` when it has one, so the operator finds it in the file.
fn group_label(index: usize, group: &toml::Table) -> String {
    let position = format!("[[nodes]] group {}", index + 1);
    let named = |key: &str| group.get(key).and_then(toml::Value::as_str);
    match (named("name"), named("prefix")) {
        (Some(name), _) => format!("{position} (name {name:?})"),
        (None, Some(prefix)) => format!("{position} (prefix {prefix:?})"),
        (None, None) => position,
    }
}

/// Why `name` cannot be a node's name (one subject token), or `None` if it can.
fn node_name_problem(name: &str) -> Option<String> {
    if name.len() > subjects::MAX_TOKEN_LEN {
        return Some(format!(
            "{} characters, over the limit of {} (a group's names are its prefix and at least \
             three digits)",
            name.len(),
            subjects::MAX_TOKEN_LEN
        ));
    }
    if subjects::is_valid_token(name) {
        return None;
    }
    Some("letters, digits, _ and -, starting with a letter or digit".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_file_round_trips_into_a_tree() {
        let set = parse_budget(
            r#"
            cluster = "alpha"
            [accounts.research]
            share = 3
            [accounts.research.nlp]
            share = 1
            [accounts.research.vision]
            share = 3
            [accounts.infra]
            share = 1
            "#,
        )
        .unwrap();
        assert_eq!(set.cluster, "alpha");
        let tree = BudgetTree::from_accounts(&set.accounts).unwrap();
        assert_eq!(
            tree.allocation_paths().collect::<Vec<_>>(),
            vec!["infra", "research/nlp", "research/vision"]
        );
    }

    #[test]
    fn budget_file_errors_name_the_place() {
        let err = parse_budget("cluster = \"a\"\n[accounts.x]\nshare = -1\n").unwrap_err();
        assert_eq!(err.to_string(), "accounts.x: `share` must be >= 0, got -1");
        let err = parse_budget("cluster = \"a\"\n[accounts.x]\nshares = 1\n").unwrap_err();
        assert_eq!(err.to_string(), "accounts.x: missing `share`");
        let err =
            parse_budget("cluster = \"a\"\n[accounts.x]\nshare = 1\nnote = \"n\"\n").unwrap_err();
        assert!(err.to_string().contains("unknown key `note`"), "{err}");
        let err = parse_budget("cluster = \"a.b\"\n[accounts.x]\nshare = 1\n").unwrap_err();
        assert!(
            err.to_string().contains("not a valid cluster name"),
            "{err}"
        );
        assert!(matches!(
            parse_budget("cluster = "),
            Err(FileError::Toml(_))
        ));
        let empty = parse_budget("cluster = \"a\"\n[accounts]\n");
        assert!(matches!(empty, Err(FileError::Budget(BudgetError::Empty))));
        // Its words once: in the message, not again as a source under it.
        let err = empty.unwrap_err();
        assert!(std::error::Error::source(&err).is_none());
        assert!(
            err.to_string().starts_with("invalid budget tree: "),
            "{err}"
        );
        // Four levels of share totals near a million: one part in about 1e24, too fine.
        let mut text = String::from("cluster = \"a\"\n");
        let mut path = String::from("accounts");
        for _ in 0..4 {
            text.push_str(&format!(
                "[{path}.y]\nshare = 1\n[{path}.x]\nshare = 999999\n"
            ));
            path.push_str(".x");
        }
        assert!(matches!(
            parse_budget(&text),
            Err(FileError::Budget(BudgetError::TooFine { .. }))
        ));
    }

    #[test]
    fn inventory_groups_expand_to_named_nodes() {
        let inv = parse_inventory(
            "cluster = \"alpha\"\n[[nodes]]\nprefix = \"gpu\"\ncount = 3\ngpus = 8\n[[nodes]]\nname = \"fat\"\ngpus = 16\n",
        )
        .unwrap();
        assert_eq!(
            inv.nodes,
            vec![
                ("fat".to_owned(), 16),
                ("gpu000".to_owned(), 8),
                ("gpu001".to_owned(), 8),
                ("gpu002".to_owned(), 8)
            ]
        );
    }

    #[test]
    fn inventory_rejects_bad_nodes() {
        let dup = "cluster = \"a\"\n[[nodes]]\nname = \"x\"\ngpus = 8\n[[nodes]]\nname = \"x\"\ngpus = 8\n";
        assert!(
            parse_inventory(dup)
                .unwrap_err()
                .to_string()
                .contains("declared twice")
        );
        let zero = "cluster = \"a\"\n[[nodes]]\nname = \"x\"\ngpus = 0\n";
        assert!(
            parse_inventory(zero)
                .unwrap_err()
                .to_string()
                .contains("`gpus` must be")
        );
        let both =
            "cluster = \"a\"\n[[nodes]]\nname = \"x\"\nprefix = \"p\"\ncount = 2\ngpus = 8\n";
        assert!(
            parse_inventory(both)
                .unwrap_err()
                .to_string()
                .contains("either")
        );
        // A `name` group is one node, whatever `count` says; unknown keys are refused.
        let counted = "cluster = \"a\"\n[[nodes]]\nname = \"x\"\ncount = 128\ngpus = 8\n";
        let err = parse_inventory(counted).unwrap_err().to_string();
        assert!(err.contains("`count` needs `prefix`"), "{err}");
        let unknown = "cluster = \"a\"\n[[nodes]]\nname = \"x\"\ngpus = 8\ncordoned = true\n";
        let err = parse_inventory(unknown).unwrap_err().to_string();
        assert!(err.contains("unknown key `cordoned`"), "{err}");
    }

    #[test]
    fn inventory_errors_name_the_group_and_the_rule() {
        let err = |text: &str| parse_inventory(text).unwrap_err().to_string();
        // A misspelt group heading is refused, not dropped with its nodes.
        let typo = "cluster = \"a\"\n[[nodes]]\nname = \"x\"\ngpus = 8\n[[nodse]]\nname = \"fat01\"\ngpus = 16\n";
        assert_eq!(
            err(typo),
            "top level: unknown key `nodse` (expected `cluster` and `[[nodes]]` groups)"
        );
        // Groups are counted from 1 and named; a duplicate names where it was first declared.
        let dup = "cluster = \"a\"\n[[nodes]]\nprefix = \"gpu\"\ncount = 2\ngpus = 8\n[[nodes]]\nname = \"gpu001\"\ngpus = 8\n";
        assert_eq!(
            err(dup),
            "[[nodes]] group 2 (name \"gpu001\"): node \"gpu001\" is declared twice (first in \
             [[nodes]] group 1 (prefix \"gpu\"))"
        );
        // The same host under two spellings would count its GPUs twice.
        let case = "cluster = \"a\"\n[[nodes]]\nprefix = \"gpu\"\ncount = 1\ngpus = 8\n[[nodes]]\nname = \"GPU000\"\ngpus = 8\n";
        let e = err(case);
        assert!(
            e.starts_with(
                "[[nodes]] group 2 (name \"GPU000\"): node \"GPU000\" differs only by case"
            ),
            "{e}"
        );
        // A prefix that leaves no room for the digits says so, not just "not valid".
        let long = format!(
            "cluster = \"a\"\n[[nodes]]\nprefix = \"{}\"\ncount = 2\ngpus = 8\n",
            "p".repeat(62)
        );
        let e = err(&long);
        assert!(e.contains("65 characters, over the limit of 64"), "{e}");
        let dotted = "cluster = \"a\"\n[[nodes]]\nname = \"rack1.n1\"\ngpus = 8\n";
        let e = err(dotted);
        assert!(
            e.contains("not a valid node name: letters, digits, _ and -"),
            "{e}"
        );
        let not_table = "cluster = \"a\"\nnodes = [1]\n";
        assert_eq!(err(not_table), "[[nodes]] group 1: must be a table");
    }

    #[test]
    fn budget_siblings_differing_only_by_case_are_refused() {
        let text =
            "cluster = \"a\"\n[accounts.research]\nshare = 1\n[accounts.Research]\nshare = 1\n";
        let e = parse_budget(text).unwrap_err().to_string();
        assert!(e.contains("differ only by case"), "{e}");
        assert!(e.contains("`research`") && e.contains("`Research`"), "{e}");
        // Cousins may share a name in any case: their paths differ.
        let cousins = "cluster = \"a\"\n[accounts.a]\nshare = 1\n[accounts.a.nlp]\nshare = 1\n[accounts.b]\nshare = 1\n[accounts.b.NLP]\nshare = 1\n";
        assert!(parse_budget(cousins).is_ok());
    }

    #[test]
    fn a_group_that_grows_keeps_its_nodes_names() {
        let names = |count: u32| -> Vec<String> {
            let file =
                format!("cluster = \"a\"\n[[nodes]]\nprefix = \"g\"\ncount = {count}\ngpus = 8\n");
            parse_inventory(&file)
                .unwrap()
                .nodes
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        let before = names(1000);
        let after = names(1001);
        assert!(before.iter().all(|n| after.contains(n)), "a name changed");
        assert!(after.contains(&"g1000".to_owned()) && after.contains(&"g999".to_owned()));
        assert_eq!(names(2), ["g000", "g001"]);
    }
}
