//! A small map kept as one sorted array, for the per-node loads.
//!
//! Place in the flow: [`crate::domain::state`] keeps who holds GPUs on each node in one of
//! these. Every decision cycle and preemption pass walks it in node order (see
//! [`crate::domain::nodes`]), while it changes only when a node gets its first job or loses
//! its last. A B-tree's walk chases pointers from node to node; an array streams, and with a
//! few hundred entries a binary search and an insert that shifts the tail are just as cheap.
//!
//! Serialized exactly as a map (the same bytes as a `BTreeMap` of the same entries), so the
//! checkpoint format does not depend on this choice.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A map from `K` to `V` as an array sorted by key, keys unique.
#[derive(Clone, PartialEq, Eq)]
pub struct FlatMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for FlatMap<K, V> {
    fn default() -> Self {
        FlatMap {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> FlatMap<K, V> {
    fn find<Q>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// The value at `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    /// The value at `key`, to change.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok().map(|i| &mut self.entries[i].1)
    }

    /// The position of `key`.
    pub fn index_of<Q>(&self, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).ok()
    }

    /// The position of `key`, inserting `V::default()` under `make_key()` there if there is
    /// none; and whether it was inserted (entries from that position on moved up by one).
    pub fn index_or_default<Q>(&mut self, key: &Q, make_key: impl FnOnce() -> K) -> (usize, bool)
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
        V: Default,
    {
        match self.find(key) {
            Ok(i) => (i, false),
            Err(i) => {
                self.entries.insert(i, (make_key(), V::default()));
                (i, true)
            }
        }
    }
}

impl<K, V> FlatMap<K, V> {
    /// The value at position `i` (see [`FlatMap::index_of`]).
    pub fn value_at(&self, i: usize) -> &V {
        &self.entries[i].1
    }

    /// The value at position `i`, to change.
    pub fn value_at_mut(&mut self, i: usize) -> &mut V {
        &mut self.entries[i].1
    }

    /// Removes the entry at position `i` (entries after it move down by one).
    pub fn remove_at(&mut self, i: usize) -> V {
        self.entries.remove(i).1
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&K, &V)> + Clone {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// Values in key order, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.entries.iter_mut().map(|(_, v)| v)
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for FlatMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// As a map, entry by entry in key order: what a `BTreeMap` writes.
impl<K: Serialize, V: Serialize> Serialize for FlatMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

/// Read as a `BTreeMap`, which sorts the entries and keeps one per key.
impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for FlatMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<K, V>::deserialize(deserializer)?;
        Ok(FlatMap {
            entries: map.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any sequence of inserts and removals leaves the entries a `BTreeMap` holds, and
        /// both serialize to the same bytes.
        #[test]
        fn behaves_and_serializes_like_a_btree_map(ops in proptest::collection::vec((any::<bool>(), 0u16..300, any::<u8>()), 0..600)) {
            let mut ours: FlatMap<u16, u8> = FlatMap::default();
            let mut model = BTreeMap::new();
            for (insert, k, v) in ops {
                if insert {
                    let (i, _) = ours.index_or_default(&k, || k);
                    *ours.value_at_mut(i) = v;
                    model.insert(k, v);
                } else {
                    let removed = ours.index_of(&k).map(|i| ours.remove_at(i));
                    prop_assert_eq!(removed, model.remove(&k));
                }
            }
            prop_assert!(ours.iter().eq(model.iter()));
            for k in 0u16..300 {
                prop_assert_eq!(ours.get(&k), model.get(&k));
            }
            let bytes = bincode::serialize(&ours).unwrap();
            prop_assert_eq!(&bytes, &bincode::serialize(&model).unwrap());
            let back: FlatMap<u16, u8> = bincode::deserialize(&bytes).unwrap();
            prop_assert!(back == ours);
        }
    }
}
