//! Account paths interned to small integers, per cluster.
//!
//! Place in the flow: a `JobSubmitted` names its allocation by path and a `BudgetTreeSet` names
//! every account by path; both are interned here once, so every later event of the job, every
//! budget epoch and every query indexes plain vectors instead of hashing strings. Ids are never
//! reused or forgotten: the table grows with the number of distinct account paths a cluster has
//! ever had (a policy-sized number), not with the number of events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Index of an account path in a cluster's [`Paths`].
pub type PathId = u32;

/// Interned account paths (allocations and inner accounts alike).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paths {
    by_name: BTreeMap<String, PathId>,
    names: Vec<String>,
}

impl Paths {
    /// The id of `path`, interning it on first sight.
    pub fn intern(&mut self, path: &str) -> PathId {
        if let Some(&id) = self.by_name.get(path) {
            return id;
        }
        // More than u32::MAX distinct paths cannot come from validated trees; saturating keeps
        // the fold total (the path then shares the last id) instead of panicking on input.
        let id = PathId::try_from(self.names.len()).unwrap_or(PathId::MAX);
        self.by_name.insert(path.to_owned(), id);
        self.names.push(path.to_owned());
        id
    }

    /// The id of `path`, if it was ever seen.
    pub fn get(&self, path: &str) -> Option<PathId> {
        self.by_name.get(path).copied()
    }

    /// The path of `id`.
    pub fn name(&self, id: PathId) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }

    /// Number of interned paths.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether nothing was interned.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Ids of `path` itself and every path below it (`path/...`), in path order.
    ///
    /// Paths sharing a prefix without a separator (`a/b` vs `a/bc`) are not below each other.
    pub fn subtree<'a>(&'a self, path: &str) -> impl Iterator<Item = PathId> + use<'a> {
        let prefix = path.to_owned();
        let len = prefix.len();
        self.by_name
            .range(prefix.clone()..)
            .take_while(move |(name, _)| name.starts_with(prefix.as_str()))
            .filter(move |(name, _)| name.len() == len || name.as_bytes().get(len) == Some(&b'/'))
            .map(|(_, &id)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtree_respects_segment_boundaries() {
        let mut p = Paths::default();
        for name in ["a/b", "a/b/x", "a/b-c", "a/bc", "a/b/y/z", "b"] {
            p.intern(name);
        }
        let names: Vec<&str> = p.subtree("a/b").map(|id| p.name(id)).collect();
        assert_eq!(names, vec!["a/b", "a/b/x", "a/b/y/z"]);
        assert_eq!(p.subtree("a").count(), 5);
        assert_eq!(p.subtree("zz").count(), 0);
        assert_eq!(p.intern("a/b"), 0);
        assert_eq!(p.len(), 6);
    }
}
