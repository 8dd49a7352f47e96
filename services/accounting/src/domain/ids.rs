//! Job ids as the fold keys them, and the hasher its tables use.
//!
//! Place in the flow: every job event names its job by id; the id is turned into a key once per
//! event ([`KeyRef::of`]) and that key is used for every lookup. Canonical UUIDs (what the
//! submission service assigns) become 128-bit integers: no allocation, two words to hash.

use std::hash::Hasher;

use serde::{Deserialize, Serialize};

/// A small, fixed-seed multiplicative hasher for job ids.
///
/// Job ids are UUIDv7 strings assigned by the submission service; the standard SipHash costs
/// more than the rest of applying a typical event, and a fixed seed keeps the table's layout a
/// function of the events alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl IdHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.add(i as u64);
        self.add((i >> 64) as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // Fold the high bits down: the table indexes with the low bits.
        self.hash ^ (self.hash >> 32)
    }
}

/// A job id as the table keys it: canonical UUIDs (what the submission service assigns) as
/// 128-bit integers, so the common case hashes two words and allocates nothing; anything else
/// as its text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum JobKey {
    /// A canonical lowercase UUID string (8-4-4-4-12 hex digits), as its 128 bits.
    Uuid(u128),
    /// Any other id, verbatim.
    Other(String),
}

impl JobKey {
    /// The borrowed key, for lookups.
    pub fn as_ref(&self) -> KeyRef<'_> {
        match self {
            JobKey::Uuid(bits) => KeyRef::Uuid(*bits),
            JobKey::Other(id) => KeyRef::Other(id),
        }
    }
}

/// A borrowed [`JobKey`], for lookups without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRef<'a> {
    /// See [`JobKey::Uuid`].
    Uuid(u128),
    /// See [`JobKey::Other`].
    Other(&'a str),
}

impl<'a> KeyRef<'a> {
    /// The key of job id `id`.
    pub fn of(id: &'a str) -> KeyRef<'a> {
        match parse_uuid(id) {
            Some(bits) => KeyRef::Uuid(bits),
            None => KeyRef::Other(id),
        }
    }

    /// The owned key.
    pub fn to_owned(self) -> JobKey {
        match self {
            KeyRef::Uuid(bits) => JobKey::Uuid(bits),
            KeyRef::Other(id) => JobKey::Other(id.to_owned()),
        }
    }
}

/// Eight lowercase hex digits (`bytes[0]` most significant) as a number, or `None` if any byte
/// is not `0-9a-f`. Works on all eight bytes at once (SWAR): a job id is parsed on every job
/// event, so this is on the fold's hottest path.
fn hex8(bytes: [u8; 8]) -> Option<u32> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let x = u64::from_le_bytes(bytes);
    if x & HIGH != 0 {
        return None;
    }
    // With every byte below 0x80, adding (0x80 - k) sets a byte's top bit exactly when the byte
    // is >= k, and never carries into the next byte.
    let at_least = |k: u8| x.wrapping_add(ONES * u64::from(0x80 - k)) & HIGH;
    let digit = at_least(b'0') & !at_least(b'9' + 1);
    let letter = at_least(b'a') & !at_least(b'f' + 1);
    if digit | letter != HIGH {
        return None;
    }
    // '0'-'9' -> low nibble; 'a'-'f' -> low nibble (1-6) + 9.
    let letters = (x >> 6) & ONES;
    let v = (x & (ONES * 0x0f)) + letters * 9;
    // Pack the eight nibbles, first byte most significant: pairs, then quads, then halves.
    let v = ((v << 4) | (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    let v = ((v << 8) | (v >> 16)) & 0x0000_ffff_0000_ffff;
    let v = ((v << 16) | (v >> 32)) & 0xffff_ffff;
    u32::try_from(v).ok()
}

/// The 128 bits of a canonical lowercase UUID string (8-4-4-4-12 hex digits). Only the
/// canonical spelling is accepted, so distinct strings never share a key (an uppercase
/// spelling is keyed as text).
pub fn parse_uuid(id: &str) -> Option<u128> {
    let b: &[u8; 36] = id.as_bytes().try_into().ok()?;
    if b[8] != b'-' || b[13] != b'-' || b[18] != b'-' || b[23] != b'-' {
        return None;
    }
    let group = |a: [u8; 4], c: [u8; 4]| {
        let mut out = [0u8; 8];
        out[..4].copy_from_slice(&a);
        out[4..].copy_from_slice(&c);
        out
    };
    let four = |at: usize| [b[at], b[at + 1], b[at + 2], b[at + 3]];
    let first = hex8(group(four(0), four(4)))?;
    let second = hex8(group(four(9), four(14)))?;
    let third = hex8(group(four(19), four(24)))?;
    let fourth = hex8(group(four(28), four(32)))?;
    Some(
        u128::from(first) << 96
            | u128::from(second) << 64
            | u128::from(third) << 32
            | u128::from(fourth),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_uuids_are_keyed_by_their_bits() {
        let id = "0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b";
        assert_eq!(parse_uuid(id), Some(0x0190a6b2_3c4d_7e5f_8a9b_0c1d2e3f4a5b));
        assert_eq!(
            KeyRef::of(id),
            KeyRef::Uuid(0x0190a6b2_3c4d_7e5f_8a9b_0c1d2e3f4a5b)
        );
        // Uppercase, missing dashes, wrong length: keyed as text, never merged with the above.
        for other in [
            "0190A6B2-3C4D-7E5F-8A9B-0C1D2E3F4A5B",
            "0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5g",
            "0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5/",
            "0190a6b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b0",
            "0190a6b2x3c4d-7e5f-8a9b-0c1d2e3f4a5b",
            "0190a6b23c4d7e5f8a9b0c1d2e3f4a5b",
            "j1",
            "",
        ] {
            assert_eq!(KeyRef::of(other), KeyRef::Other(other));
        }
    }

    proptest::proptest! {
        /// Against formatting: every 128-bit value round-trips, and any single byte changed to
        /// something other than a lowercase hex digit (or a dash moved) is refused.
        #[test]
        fn parse_round_trips_and_refuses_non_canonical(
            bits in proptest::prelude::any::<u128>(),
            at in 0usize..36,
            byte in proptest::prelude::any::<u8>(),
        ) {
            let hex = format!("{bits:032x}");
            let id = format!(
                "{}-{}-{}-{}-{}",
                &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]
            );
            proptest::prop_assert_eq!(parse_uuid(&id), Some(bits));
            let mut bytes = id.clone().into_bytes();
            bytes[at] = byte;
            let dash = matches!(at, 8 | 13 | 18 | 23);
            let valid = if dash { byte == b'-' } else { byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte) };
            if let Ok(changed) = String::from_utf8(bytes) {
                proptest::prop_assert_eq!(parse_uuid(&changed).is_some(), valid);
            }
        }
    }
}
