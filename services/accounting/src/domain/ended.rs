//! Ids of jobs that ended, remembered while their end is inside the window.
//!
//! Place in the flow: when a job finishes, fails or is cancelled, its id moves here from the
//! live table. The fold consults this set for two things: a repeated stop (or a late start) of
//! an ended job is recognised as such, and a re-published `JobSubmitted` of an ended job is a
//! duplicate, not a new job. Once a job's end falls out of the window it is forgotten (and a
//! stale re-publication is then caught by the stale-submit rule, see [`super::outcome::Skip`]).
//!
//! Why generations and Bloom filters: there are many more ended jobs in a 7-day window than live
//! ones, and every submission must check that its id is not among them. Ids are appended to the
//! current *generation* (a plain vector, sealed and sorted when its cluster sweeps), each with a
//! small Bloom filter; a lookup probes the filters (a few cache-resident bits each) and searches
//! a generation only on a hit. Forgetting is dropping whole generations: no per-id work.

use std::collections::VecDeque;
use std::hash::Hasher;

use serde::{Deserialize, Serialize};

use super::ids::{IdHasher, KeyRef};

/// Bits of Bloom filter per id: with three probes in one word, about 1% false positives (a false
/// positive only costs a search of one generation).
const BITS_PER_ID: usize = 16;

/// A 64-bit hash of a key, for the Bloom filters.
fn key_hash(key: KeyRef<'_>) -> u64 {
    let mut h = IdHasher::default();
    match key {
        KeyRef::Uuid(bits) => h.write_u128(bits),
        KeyRef::Other(id) => h.write(id.as_bytes()),
    }
    // One more multiply-xorshift: the Bloom probes use several bit ranges of the hash.
    let x = h.finish().wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

/// A Bloom filter over key hashes; grows (and is rebuilt) to keep [`BITS_PER_ID`].
///
/// Blocked: all three probes of a key fall in one 64-bit word, so a lookup touches one cache
/// line per generation (at the price of a slightly higher false-positive rate, about 1%).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Bloom {
    words: Vec<u64>,
}

impl Bloom {
    /// The word a key's probes fall in, and the probe bits within it.
    fn probe(&self, hash: u64) -> (usize, u64) {
        // The word count is a power of two, so masking picks a word uniformly.
        let word = (hash as usize) & self.words.len().saturating_sub(1);
        let bits = (1u64 << ((hash >> 40) & 63))
            | (1u64 << ((hash >> 46) & 63))
            | (1u64 << ((hash >> 52) & 63));
        (word, bits)
    }

    fn insert(&mut self, hash: u64) {
        let (word, bits) = self.probe(hash);
        if let Some(w) = self.words.get_mut(word) {
            *w |= bits;
        }
    }

    fn may_contain(&self, hash: u64) -> bool {
        let (word, bits) = self.probe(hash);
        self.words.get(word).is_some_and(|w| w & bits == bits)
    }

    /// Resized for `ids` ids and refilled from `hashes`.
    fn rebuilt(ids: usize, hashes: impl Iterator<Item = u64>) -> Bloom {
        let words = (ids.max(1) * BITS_PER_ID).div_ceil(64).next_power_of_two();
        let mut bloom = Bloom {
            words: vec![0; words],
        };
        for h in hashes {
            bloom.insert(h);
        }
        bloom
    }
}

/// The ids of jobs that ended between two sweeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Generation {
    /// Latest end time in the generation: it is forgotten once this leaves the window.
    last_end: i64,
    /// UUID ids; sorted once sealed.
    uuids: Vec<u128>,
    /// Other ids; sorted once sealed.
    others: Vec<String>,
    /// Sealed generations take no more ids and are searched by bisection.
    sealed: bool,
    bloom: Bloom,
}

impl Generation {
    fn len(&self) -> usize {
        self.uuids.len() + self.others.len()
    }

    fn hashes(&self) -> impl Iterator<Item = u64> + '_ {
        let uuids = self.uuids.iter().map(|&b| key_hash(KeyRef::Uuid(b)));
        let others = self.others.iter().map(|s| key_hash(KeyRef::Other(s)));
        uuids.chain(others)
    }

    fn insert(&mut self, end: i64, key: KeyRef<'_>) {
        self.last_end = self.last_end.max(end);
        match key {
            KeyRef::Uuid(bits) => self.uuids.push(bits),
            KeyRef::Other(id) => self.others.push(id.to_owned()),
        }
        if self.bloom.words.len() * 64 < self.len() * BITS_PER_ID {
            // Doubling keeps rebuilds amortised O(1) per id.
            self.bloom = Bloom::rebuilt(self.len() * 2, self.hashes());
        } else {
            self.bloom.insert(key_hash(key));
        }
    }

    fn contains(&self, key: KeyRef<'_>, hash: u64) -> bool {
        if !self.bloom.may_contain(hash) {
            return false;
        }
        match (key, self.sealed) {
            (KeyRef::Uuid(bits), true) => self.uuids.binary_search(&bits).is_ok(),
            (KeyRef::Uuid(bits), false) => self.uuids.contains(&bits),
            (KeyRef::Other(id), true) => self
                .others
                .binary_search_by(|probe| probe.as_str().cmp(id))
                .is_ok(),
            (KeyRef::Other(id), false) => self.others.iter().any(|o| o == id),
        }
    }

    fn seal(&mut self) {
        self.uuids.sort_unstable();
        self.others.sort_unstable();
        self.uuids.shrink_to_fit();
        self.others.shrink_to_fit();
        self.bloom = Bloom::rebuilt(self.len(), self.hashes());
        self.sealed = true;
    }
}

/// One cluster's ended jobs, oldest generation first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedJobs {
    generations: VecDeque<Generation>,
}

impl EndedJobs {
    /// Remembers that the job keyed `key` ended at `end`.
    pub fn insert(&mut self, end: i64, key: KeyRef<'_>) {
        if self.generations.back().is_none_or(|g| g.sealed) {
            self.generations.push_back(Generation {
                last_end: end,
                ..Generation::default()
            });
        }
        if let Some(current) = self.generations.back_mut() {
            current.insert(end, key);
        }
    }

    /// Whether the job keyed `key` is remembered as ended.
    pub fn contains(&self, key: KeyRef<'_>) -> bool {
        let hash = key_hash(key);
        self.generations.iter().any(|g| g.contains(key, hash))
    }

    /// Seals the current generation and forgets generations whose every job ended at or
    /// before `bound`.
    pub fn sweep(&mut self, bound: i64) {
        if let Some(current) = self.generations.back_mut()
            && !current.sealed
        {
            current.seal();
        }
        while self
            .generations
            .front()
            .is_some_and(|g| g.last_end <= bound)
        {
            self.generations.pop_front();
        }
    }

    /// Ended jobs remembered.
    pub fn len(&self) -> usize {
        self.generations.iter().map(Generation::len).sum()
    }

    /// Whether no ended job is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generations_are_forgotten_whole_once_outside_the_window() {
        let mut e = EndedJobs::default();
        e.insert(10, KeyRef::Other("a"));
        e.insert(20, KeyRef::Uuid(7));
        e.sweep(5); // seals generation 1 (last end 20), keeps it
        e.insert(30, KeyRef::Other("b"));
        assert!(e.contains(KeyRef::Other("a")));
        assert!(e.contains(KeyRef::Uuid(7)));
        assert!(e.contains(KeyRef::Other("b")));
        assert!(!e.contains(KeyRef::Uuid(8)));
        e.sweep(20); // forgets generation 1, seals generation 2
        assert!(!e.contains(KeyRef::Other("a")));
        assert!(!e.contains(KeyRef::Uuid(7)));
        assert!(e.contains(KeyRef::Other("b")));
        assert_eq!(e.len(), 1);
        e.sweep(30);
        assert!(e.is_empty());
    }

    proptest! {
        /// Membership is exact (the Bloom filters never hide a member), through growth and
        /// sealing.
        #[test]
        fn membership_is_exact(ids in proptest::collection::vec(0u128..400, 0..300), probe in 0u128..400, cut in 0usize..300) {
            let mut e = EndedJobs::default();
            for (i, &id) in ids.iter().enumerate() {
                if i == cut {
                    e.sweep(i64::MIN);
                }
                if id % 3 == 0 {
                    e.insert(0, KeyRef::Other(&id.to_string()));
                } else {
                    e.insert(0, KeyRef::Uuid(id));
                }
            }
            for &id in &ids {
                let s = id.to_string();
                let key = if id % 3 == 0 { KeyRef::Other(&s) } else { KeyRef::Uuid(id) };
                prop_assert!(e.contains(key));
            }
            let s = probe.to_string();
            let key = if probe % 3 == 0 { KeyRef::Other(&s) } else { KeyRef::Uuid(probe) };
            prop_assert_eq!(e.contains(key), ids.contains(&probe));
        }
    }
}
