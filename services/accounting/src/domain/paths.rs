//! Account paths interned to small integers, per cluster.
//!
//! Place in the flow: a `JobSubmitted` names its allocation by path and a `BudgetTreeSet` names
//! every account by path; both are interned here once, so every later event of the job, every
//! budget epoch and every query indexes plain vectors instead of hashing strings. Ids are never
//! reused or forgotten: the table grows with the number of distinct account paths a cluster has
//! ever had (a policy-sized number), not with the number of events.

use std::hash::Hasher;

use serde::{Deserialize, Serialize};

use super::ids::IdHasher;

/// Index of an account path in a cluster's [`Paths`].
pub type PathId = u32;

/// An empty slot of the lookup table.
const EMPTY: u32 = u32::MAX;

fn hash(path: &str) -> u64 {
    let mut h = IdHasher::default();
    h.write(path.as_bytes());
    h.finish()
}

/// Interned account paths (allocations and inner accounts alike).
///
/// Every `JobSubmitted` looks its allocation up here, so the lookup is built to stay in cache:
/// the texts sit back to back in one string and the table is a flat array of ids (open
/// addressing, linear probing, at most half full), instead of a map of separately allocated
/// strings whose every comparison would chase a pointer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paths {
    /// Every path's text, back to back.
    text: String,
    /// Where path `id` lies in `text`: (start, length).
    spans: Vec<(usize, usize)>,
    /// Lookup table: ids by path hash; its length is 0 or a power of two.
    slots: Vec<u32>,
    /// Every id, sorted by path (for reports and subtree ranges; paths are added rarely).
    sorted: Vec<PathId>,
    /// The path up to its last `/`, interned too, so subtree sums walk ids, not strings.
    parents: Vec<Option<PathId>>,
}

impl Paths {
    /// The id of `path`, interning it (and every ancestor path) on first sight.
    pub fn intern(&mut self, path: &str) -> PathId {
        if let Some(id) = self.get(path) {
            return id;
        }
        // Ancestors first, shortest to longest, iteratively (a path is input: no recursion
        // depth proportional to its number of segments).
        let mut parent = None;
        for (cut, _) in path.match_indices('/') {
            let prefix = &path[..cut];
            parent = Some(match self.get(prefix) {
                Some(id) => id,
                None => self.push(prefix, parent),
            });
        }
        self.push(path, parent)
    }

    fn push(&mut self, path: &str, parent: Option<PathId>) -> PathId {
        if (self.spans.len() + 1) * 2 > self.slots.len() {
            self.grow();
        }
        // More than u32::MAX - 1 distinct paths cannot come from validated trees; saturating
        // keeps the fold total (the path then shares the last id) instead of panicking.
        let id = PathId::try_from(self.spans.len())
            .unwrap_or(EMPTY - 1)
            .min(EMPTY - 1);
        self.spans.push((self.text.len(), path.len()));
        self.text.push_str(path);
        self.parents.push(parent);
        self.place(id);
        let at = self
            .sorted
            .partition_point(|&other| self.name(other) < path);
        self.sorted.insert(at, id);
        id
    }

    /// Puts `id` in the first free slot from its hash.
    fn place(&mut self, id: PathId) {
        let mask = self.slots.len().saturating_sub(1);
        let mut i = (hash(self.name(id)) as usize) & mask;
        while self.slots.get(i).is_some_and(|&s| s != EMPTY) {
            i = (i + 1) & mask;
        }
        if let Some(slot) = self.slots.get_mut(i) {
            *slot = id;
        }
    }

    /// Doubles the table (at least 16 slots) and re-places every id.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(16);
        self.slots = vec![EMPTY; size];
        for index in 0..self.spans.len() {
            if let Ok(id) = PathId::try_from(index) {
                self.place(id);
            }
        }
    }

    /// The path directly above `id` (its text up to the last `/`), if any.
    pub fn parent(&self, id: PathId) -> Option<PathId> {
        self.parents.get(id as usize).copied().flatten()
    }

    /// The id of `path`, if it was ever seen.
    pub fn get(&self, path: &str) -> Option<PathId> {
        let mask = self.slots.len().checked_sub(1)?;
        let mut i = (hash(path) as usize) & mask;
        // The table is at most half full, so probing reaches an empty slot; bounded all the
        // same, so a table read from a damaged checkpoint cannot make it spin.
        for _ in 0..self.slots.len() {
            let id = *self.slots.get(i)?;
            if id == EMPTY {
                return None;
            }
            if self.name(id) == path {
                return Some(id);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// The path of `id`.
    pub fn name(&self, id: PathId) -> &str {
        self.spans
            .get(id as usize)
            .and_then(|&(start, len)| self.text.get(start..start + len))
            .unwrap_or("")
    }

    /// Every path and its id, in path order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, PathId)> {
        self.sorted.iter().map(|&id| (self.name(id), id))
    }

    /// Number of interned paths.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether nothing was interned.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Ids of `path` itself and every path below it (`path/...`), in path order.
    ///
    /// Paths sharing a prefix without a separator (`a/b` vs `a/bc`) are not below each other.
    pub fn subtree<'a>(&'a self, path: &str) -> impl Iterator<Item = PathId> + use<'a> {
        // Every path starting with `path` sorts at or after it, contiguously.
        let first = self.sorted.partition_point(|&id| self.name(id) < path);
        let prefix = path.to_owned();
        let len = prefix.len();
        self.sorted[first..]
            .iter()
            .map(move |&id| (self.name(id), id))
            .take_while(move |(name, _)| name.starts_with(prefix.as_str()))
            .filter(move |(name, _)| name.len() == len || name.as_bytes().get(len) == Some(&b'/'))
            .map(|(_, id)| id)
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
        assert_eq!(names, vec!["a/b", "a/b/x", "a/b/y", "a/b/y/z"]);
        assert_eq!(p.subtree("zz").count(), 0);
        // Ancestors are interned with their descendants.
        assert_eq!(p.intern("a"), 0);
        assert_eq!(p.intern("a/b"), 1);
        assert_eq!(p.len(), 8);
        let bx = p.get("a/b/x").unwrap();
        assert_eq!(p.parent(bx).map(|id| p.name(id)), Some("a/b"));
        assert_eq!(p.parent(0), None);
        assert_eq!(p.subtree("a").count(), 7);
    }

    #[test]
    fn a_table_without_an_empty_slot_answers_instead_of_spinning() {
        let mut p = Paths::default();
        p.intern("a");
        // As a damaged checkpoint could hold it: every slot taken.
        p.slots.iter_mut().for_each(|slot| *slot = 0);
        assert_eq!(p.get("a"), Some(0));
        assert_eq!(p.get("nowhere"), None);
    }

    #[test]
    fn lookups_survive_growth() {
        let mut p = Paths::default();
        let names: Vec<String> = (0..500).map(|i| format!("org/p{}/t{i}", i % 7)).collect();
        for n in &names {
            p.intern(n);
        }
        // 500 leaves and 7 programs and the root.
        assert_eq!(p.len(), 508);
        for n in &names {
            let id = p.get(n).unwrap();
            assert_eq!(p.name(id), n);
        }
        assert_eq!(p.get("org/p1/t"), None);
        assert_eq!(p.get(""), None);
        let sorted: Vec<&str> = p.iter().map(|(n, _)| n).collect();
        let mut expected = sorted.clone();
        expected.sort_unstable();
        assert_eq!(sorted, expected);
    }
}
