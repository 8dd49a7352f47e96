//! A sorted map stored as a list of short sorted arrays, for the per-allocation job queues.
//!
//! Place in the flow: [`crate::domain::state`] keeps each allocation's queued jobs in one of
//! these, in queue order; [`crate::domain::decide()`] walks every queue once per cycle to place
//! jobs and to give every waiting job its reason.
//!
//! Why not a `BTreeMap`: a cycle reads the whole queue, and at 100,000 queued jobs a B-tree's
//! scattered ~0.5 KB nodes made that walk memory-latency bound (most of the cycle). Here the
//! entries sit in arrays of at most [`CHUNK_MAX`] entries, so the walk streams through memory,
//! while an insert or removal still only moves one chunk's entries (a few KB) after a binary
//! search over chunks and within one. Chunks that shrink below [`CHUNK_MIN`] merge with a
//! neighbour, so the walk never degrades into many tiny arrays.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Largest chunk; a chunk that grows past it is split in two halves.
pub const CHUNK_MAX: usize = 256;
/// A chunk smaller than this merges with a neighbour when the two fit in one chunk.
pub const CHUNK_MIN: usize = CHUNK_MAX / 4;

/// A sorted map from `K` to `V` with cheap in-order iteration.
#[derive(Clone)]
pub struct SortedChunks<K, V> {
    /// Non-empty chunks, each sorted, every key of a chunk below every key of the next.
    chunks: Vec<Vec<(K, V)>>,
    len: usize,
}

/// In-order iteration over the entries.
pub type Iter<'a, K, V> = std::iter::Flatten<std::slice::Iter<'a, Vec<(K, V)>>>;

impl<K, V> Default for SortedChunks<K, V> {
    fn default() -> Self {
        SortedChunks {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<K: Ord, V> SortedChunks<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk that holds `key` or would: the first whose last key is not below it (the last
    /// chunk if every key is below).
    fn chunk_for(&self, key: &K) -> usize {
        let i = self
            .chunks
            .partition_point(|c| c.last().is_some_and(|(k, _)| k < key));
        i.min(self.chunks.len().saturating_sub(1))
    }

    /// Inserts or replaces; returns the value replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if self.chunks.is_empty() {
            self.chunks.push(vec![(key, value)]);
            self.len = 1;
            return None;
        }
        let c = self.chunk_for(&key);
        let chunk = &mut self.chunks[c];
        match chunk.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => Some(std::mem::replace(&mut chunk[i].1, value)),
            Err(i) => {
                chunk.insert(i, (key, value));
                self.len += 1;
                if chunk.len() > CHUNK_MAX {
                    let upper = chunk.split_off(chunk.len() / 2);
                    self.chunks.insert(c + 1, upper);
                }
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        if self.chunks.is_empty() {
            return None;
        }
        let c = self.chunk_for(key);
        let chunk = &mut self.chunks[c];
        let i = chunk.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
        let (_, value) = chunk.remove(i);
        self.len -= 1;
        if chunk.is_empty() {
            self.chunks.remove(c);
        } else if chunk.len() < CHUNK_MIN {
            self.merge_around(c);
        }
        Some(value)
    }

    /// Merges small chunk `c` into a neighbour if the two fit in one chunk.
    fn merge_around(&mut self, c: usize) {
        let fits = |a: usize, b: usize| a + b <= CHUNK_MAX;
        if c + 1 < self.chunks.len() && fits(self.chunks[c].len(), self.chunks[c + 1].len()) {
            let next = self.chunks.remove(c + 1);
            self.chunks[c].extend(next);
        } else if c > 0 && fits(self.chunks[c - 1].len(), self.chunks[c].len()) {
            let this = self.chunks.remove(c);
            self.chunks[c - 1].extend(this);
        }
    }

    /// The value at `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        if self.chunks.is_empty() {
            return None;
        }
        let chunk = &self.chunks[self.chunk_for(key)];
        let i = chunk.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
        Some(&chunk[i].1)
    }

    /// Entries in key order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        self.chunks.iter().flatten()
    }

    /// Keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.iter().map(|(k, _)| k)
    }

    /// Chunks held (for tests of the layout).
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}

/// Equal when the entries are equal, however they happen to be chunked: a state rebuilt from
/// the log must equal the one that was updated in place.
impl<K: PartialEq, V: PartialEq> PartialEq for SortedChunks<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self
                .chunks
                .iter()
                .flatten()
                .eq(other.chunks.iter().flatten())
    }
}

impl<K: Eq, V: Eq> Eq for SortedChunks<K, V> {}

/// Serialized as its chunks, so a restored map has exactly the layout it was saved with.
impl<K: Serialize, V: Serialize> Serialize for SortedChunks<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.chunks.serialize(serializer)
    }
}

/// Checks what the map relies on: chunks non-empty and at most [`CHUNK_MAX`] long, keys
/// strictly increasing across all of them; anything else is refused as corrupt.
impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for SortedChunks<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let chunks = Vec::<Vec<(K, V)>>::deserialize(deserializer)?;
        let mut len = 0usize;
        let mut last: Option<&K> = None;
        for chunk in &chunks {
            if chunk.is_empty() || chunk.len() > CHUNK_MAX {
                return Err(D::Error::custom(format!(
                    "sorted chunks: a chunk of {} entries",
                    chunk.len()
                )));
            }
            for (k, _) in chunk {
                if last.is_some_and(|l| l >= k) {
                    return Err(D::Error::custom("sorted chunks: keys out of order"));
                }
                last = Some(k);
            }
            len += chunk.len();
        }
        Ok(SortedChunks { chunks, len })
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for SortedChunks<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.chunks.iter().flatten().map(|(k, v)| (k, v)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any sequence of inserts and removals leaves the same entries, in the same order, as
        /// a `BTreeMap`, with every chunk non-empty and at most CHUNK_MAX long.
        #[test]
        fn behaves_like_a_btree_map(ops in proptest::collection::vec((any::<bool>(), 0u16..2000, any::<u8>()), 0..3000)) {
            let mut ours = SortedChunks::new();
            let mut model = BTreeMap::new();
            for (insert, k, v) in ops {
                if insert {
                    prop_assert_eq!(ours.insert(k, v), model.insert(k, v));
                } else {
                    prop_assert_eq!(ours.remove(&k), model.remove(&k));
                }
                prop_assert_eq!(ours.len(), model.len());
            }
            prop_assert!(ours.iter().map(|(k, v)| (*k, *v)).eq(model.iter().map(|(k, v)| (*k, *v))));
            for c in &ours.chunks {
                prop_assert!(!c.is_empty() && c.len() <= CHUNK_MAX);
            }
            for k in 0u16..2000 {
                prop_assert_eq!(ours.get(&k), model.get(&k));
            }
        }
    }

    #[test]
    fn chunks_split_and_merge() {
        let mut m = SortedChunks::new();
        for k in 0..1000u32 {
            m.insert(k, ());
        }
        assert!(m.chunk_count() >= 1000 / CHUNK_MAX);
        for k in 0..990u32 {
            m.remove(&k);
        }
        // Ten entries left: merged back into one chunk.
        assert_eq!(m.chunk_count(), 1);
        assert_eq!(
            m.keys().copied().collect::<Vec<_>>(),
            (990..1000).collect::<Vec<_>>()
        );
        // Equality ignores the chunking.
        let mut fresh = SortedChunks::new();
        for k in 990..1000u32 {
            fresh.insert(k, ());
        }
        assert_eq!(m, fresh);
    }
}
